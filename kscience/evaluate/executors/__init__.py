"""Where evaluations run (trusted side): each executor hands an `EvalRequest` to a judge and
returns its `EvalResult` as a future.

    base.py          `Executor`, and `LocalExecutor`: one slot per GPU on this machine
    factory.py       `make_executor`: the executor a run's `--executor` spec names
    slot.py          a slot's long-lived judge process (`python -m kscience.evaluate.executors.slot`)
    carried.py       a problem's files, sent with its requests, unpacked where they are judged
    ray_cluster.py   `RayExecutor`: slots on a Ray cluster
    queue_dir.py     `QueueExecutor`: requests as files in a folder another machine serves
    queue_worker.py  the machine that serves such a folder (`kscience worker`)
    queue_files.py   the folder's layout and its atomic file operations

Nothing is imported here.
"""
