"""Which Triton cache entries a worker used (the untrusted side; set up by the worker's environment).

Triton opens its cache through the class named in TRITON_CACHE_MANAGER, once per kernel it
compiles or finds already compiled. This one is Triton's own file cache that also appends each
entry's key to the file named by KSCIENCE_TRITON_RECORD, so the trusted side can read the compile
facts of exactly this evaluation's kernels from the shared, warm cache (see
`compile_facts.collect`). `compile_facts.recording_env` names both. The candidate can write to that file too: what it records is advice,
checked against the cache's own entries, never evidence.
"""

from __future__ import annotations

import os

from triton.runtime.cache import FileCacheManager

from kscience.evaluate.compile_facts import RECORD_ENV


class RecordingCacheManager(FileCacheManager):
    def __init__(self, key, override=False, dump=False):
        super().__init__(key, override, dump)
        record = os.environ.get(RECORD_ENV)
        if record and not override and not dump:
            with open(record, "a") as f:
                f.write(key + "\n")
