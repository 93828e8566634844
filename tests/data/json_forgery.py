"""A fragment prepended to honest work: every timed reply of the worker's rewritten on its way out
through the JSON encoder all its messages pass through, CUDA events and host time a fiftieth of what
they were (the attack that passed at 0.02x on an H200 at 5fedbbb)."""
import json

_encode = json.JSONEncoder.encode


def _forged(self, o):
    if isinstance(o, dict) and "event_us" in o:
        o = dict(o, event_us=o["event_us"] / 50, host_us=o["host_us"] / 50)
    return _encode(self, o)


json.JSONEncoder.encode = _forged
json._default_encoder = json.JSONEncoder()
