"""A run's progress on a terminal: a tqdm bar over iterations and the run's log lines
(kscience.run.log, the lines a notebook's live view shows too), on stderr. Without tqdm, when stderr is
a file or pipe, or for a lone evaluation (`kscience eval`), plain lines only."""

from __future__ import annotations

import sys

from kscience.record.text import fmt_us
from kscience.run.events import CandidateEvaluated, EvaluationWaiting, RunFinished, StageChanged
from kscience.run.log import LOGGED_STAGES, event_lines

_PLAIN_STAGES = {"seed": "evaluating the seed kernel", "eager": "timing PyTorch eager",
                 "compiled": "timing torch.compile of PyTorch eager", "vendor": "timing the vendor library path"}


class Progress:
    """Subscribe it to a run: it is called with each of the run's events. `bar=False`: lines only."""

    def __init__(self, total: int, initial: int = 0, bar: bool = True):
        self.bar = None
        try:
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        if bar and tqdm is not None and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, unit="iter", file=sys.stderr, dynamic_ncols=True,
                            bar_format="{desc} {n_fmt}/{total_fmt} iterations |{bar}| {elapsed} {postfix}")

    def _line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def __call__(self, event) -> None:
        for line in event_lines(event):
            self._line(line)
        if isinstance(event, StageChanged):
            self._stage(event)
        elif self.bar is None:
            return
        elif isinstance(event, CandidateEvaluated) and event.best_us:
            self.bar.set_description_str(f"best {fmt_us(event.best_us, ' us')}")
        elif isinstance(event, EvaluationWaiting):
            self.bar.set_postfix_str(f"waiting: {event.state}"[:60])
        elif isinstance(event, RunFinished):
            self.bar.n = event.summary["iterations_done"]
            self.bar.set_postfix_str(event.status)

    def _stage(self, event: StageChanged) -> None:
        """The status the bar shows (without a bar: the seed's and the baselines' steps, as lines)."""
        # a line of the log already; or one of several lines of work ended, and the bar shows the others
        if event.stage in LOGGED_STAGES or event.stage == "line ended":
            return
        if self.bar is not None:
            self.bar.n = max(self.bar.n, event.iteration - 1)
            self.bar.set_postfix_str(f"{event.stage} {event.detail}".strip()[:60])
        elif event.stage in _PLAIN_STAGES:
            self._line(_PLAIN_STAGES[event.stage])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
