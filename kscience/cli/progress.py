"""A run's progress on a terminal: a tqdm bar over iterations and a line per evaluated candidate,
on stderr. Without tqdm, or when stderr is a file or pipe, plain lines only."""

from __future__ import annotations

import sys

from kscience.run.events import (CandidateEvaluated, CandidateProfiled, EvaluationWaiting, HypothesesProposed, RunFinished,
                             StageChanged)
from kscience.scientist.candidate import speedup
from kscience.record.text import fmt_us, fmt_x, kind_text

_PLAIN_STAGES = {"seed": "evaluating the seed kernel", "reference": "timing PyTorch eager",
                 "compiled": "timing torch.compile of PyTorch eager", "vendor": "timing the vendor library path"}


class Progress:
    """Subscribe it to a run: it is called with each of the run's events."""

    def __init__(self, total: int, initial: int = 0):
        self.bar = None
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if tqdm is not None and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="iter", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc} {n_fmt}/{total_fmt} iterations |{bar}| {elapsed} {postfix}")

    def _line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def __call__(self, event) -> None:
        if isinstance(event, StageChanged):
            # the run ends early and says why; a composite says what it is; a library baseline is not installed
            if event.stage in ("done", "compose", "library missing"):
                self._line(event.detail)
            elif event.stage == "line ended":  # one of several lines of work ended; the bar shows the others
                pass
            elif self.bar is not None:
                self.bar.n = max(self.bar.n, event.iteration - 1)
                self.bar.set_postfix_str(f"{event.stage} {event.detail}".strip()[:60])
            elif event.stage in _PLAIN_STAGES:
                self._line(_PLAIN_STAGES[event.stage])
        elif isinstance(event, HypothesesProposed):
            chosen = [p["title"] for p in event.plans if p.get("chosen")]
            self._line(f"iteration {event.iteration}: from {event.base_id}, trying: {'; '.join(chosen)}")
        elif isinstance(event, CandidateEvaluated):
            if event.status == "ok":
                vs_seed = fmt_x(speedup(event.seed_us, event.geomean_us))
                us, what = f"{fmt_us(event.geomean_us):>15} us {vs_seed:>9} vs seed", event.hypothesis
            else:
                us, what = " " * 36, event.message
            # Tagged with its iteration: with several lines at once, verdicts of different iterations interleave.
            tag = f"it {event.iteration}" if event.iteration else ""
            self._line(f"  {tag:<5} {event.candidate_id} {kind_text(event.kind):<14} {event.status:<13} {us}  "
                       f"{what[:70]}")
            if self.bar is not None and event.best_us:
                self.bar.set_description_str(f"best {fmt_us(event.best_us, ' us')}")
        elif isinstance(event, CandidateProfiled):  # what the profile cost, or why there is none (said once)
            self._line(f"  {event.message}")
        elif isinstance(event, EvaluationWaiting):
            self._line(f"  {event.candidate_id} waiting {event.waited_s:.0f} s: {event.state}")
            if self.bar is not None:
                self.bar.set_postfix_str(f"waiting: {event.state}"[:60])
        elif isinstance(event, RunFinished) and self.bar is not None:
            self.bar.n = event.summary["iterations_done"]
            self.bar.set_postfix_str(event.status)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
