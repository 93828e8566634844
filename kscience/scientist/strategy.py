"""Choosing the base to build on and a reference to learn from, without asking a model.

Two rules, both deterministic for a given random generator:

- tournament: the fastest correct kernel is the base; among the next fastest few, the one whose
  per-shape profile differs most from the base's is the reference (it is good where the base is
  weak, which is what the GPU Kernel Scientist's selector looks for when it pairs two kernels).
- tree: the attempts form a tree (each child points at the kernel it was derived from). As in
  STARK's strategic search, a node is expanded epsilon-greedily: usually the fastest live node,
  sometimes a random other live node. A node whose last few attempts all failed or were slower
  than it is a dead branch and is not expanded again.

Without any correct member both fall back to the seed, the member without a parent. Where other lines
of the run are designing on some bases right now (`taken`), both build on another correct member
if there is one, so concurrent lines explore different kernels.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from kscience.scientist import compose
from kscience.record.candidate import uplift_pct
from kscience.record.seen import Seen

OK = "ok"  # EvalResult status of a correct kernel
TOURNAMENT_TOP_K = 5  # how far down the ranking a reference may come from
PRUNE_AFTER = 3  # consecutive failed or slower attempts that make a node a dead branch


@dataclass
class CandidateView:
    """What the scientist sees of one population member."""

    id: str
    parent_id: str | None
    hypothesis: str  # the plan title that produced it ("seed" for the seed)
    status: str  # an EvalResult status
    geomean_us: float | None
    shape_times: dict[str, float]  # shape label -> median us (benchmark shapes only)
    source: str
    message: str  # the evaluation's one-line message
    depth: int = 0  # distance from the seed in the attempt tree
    n_children: int = 0
    coverage: str = ""  # which shapes its verdict covered (briefing.coverage)
    # What a profiler saw, and what the evaluation brought back beside it; None: nothing yet.
    profile: Seen | None = None
    failing_shape: dict | None = None  # the shape its verdict failed on, where it failed on one
    deviations: str = ""  # what its writer said it did otherwise than the plan asked


@dataclass
class Selection:
    base_id: str
    reference_id: str | None
    justification: str


def is_ok(c: CandidateView) -> bool:
    return c.status == OK and c.geomean_us is not None and c.geomean_us > 0


def seed_of(population: list[CandidateView]) -> CandidateView:
    return next((c for c in population if c.parent_id is None), population[0])


def ranked(population: list[CandidateView]) -> list[CandidateView]:
    """Correct members, fastest first (ties: earlier member first). A per-shape composite is left out:
    it dispatches to other members, which are here themselves, and these rules serve scientists (the
    offline one) that tune a kernel's own knobs, which a dispatcher has none of; a model may still
    choose a composite as its base."""
    return sorted((c for c in population if is_ok(c) and not compose.is_composite(c.source)),
                  key=lambda c: c.geomean_us)


def profile_distance(a: CandidateView, b: CandidateView) -> tuple[float, list[str]]:
    """How differently two kernels spread their time over the shared shapes, and where b is faster.

    Each profile is log time per shape minus its mean, so a kernel uniformly 10% slower has the
    same profile as the base (distance 0): only a different shape of strengths counts.
    """
    shared = [s for s in a.shape_times if s in b.shape_times and a.shape_times[s] > 0 and b.shape_times[s] > 0]
    if not shared:
        return 0.0, []
    ratios = [math.log(b.shape_times[s] / a.shape_times[s]) for s in shared]
    mean = sum(ratios) / len(ratios)
    distance = math.sqrt(sum((r - mean) ** 2 for r in ratios) / len(ratios))
    return distance, [s for s, r in zip(shared, ratios) if r < 0]


def _faster_phrase(base: CandidateView, ref: CandidateView, faster: list[str]) -> str:
    if not faster:
        return "it is slower everywhere but by uneven amounts"
    gains = [f"{s} ({uplift_pct(base.shape_times[s], ref.shape_times[s]):+.1f}%)" for s in faster[:3]]
    more = f" and {len(faster) - 3} more" if len(faster) > 3 else ""
    return "it beats the base on " + ", ".join(gains) + more


def most_different(base: CandidateView, pool: list[CandidateView]) -> tuple[CandidateView | None, str]:
    """The member of `pool` whose profile differs most from `base`, with the reason in words."""
    best, best_key, best_faster = None, None, []
    for c in pool:
        distance, faster = profile_distance(base, c)
        key = (distance, len(faster), -c.geomean_us)
        if best_key is None or key > best_key:
            best, best_key, best_faster = c, key, faster
    if best is None:
        return None, ""
    if sum(s in best.shape_times for s in base.shape_times) < 2:  # one shape: no profile to differ
        return best, (f"reference {best.id} ({best.geomean_us:,.2f} µs) is the fastest other member "
                      "(one benchmark shape, so no per-shape profile to compare)")
    # The distance is a standard deviation of log time ratios: as a percentage, the typical
    # deviation of one shape from a uniform speed-up.
    why = (f"reference {best.id} ({best.geomean_us:,.2f} µs) has the most different per-shape profile "
           f"(shapes differ by {(math.exp(best_key[0]) - 1) * 100:.0f}% on average beyond a uniform "
           f"speed-up): {_faster_phrase(base, best, best_faster)}")
    return best, why


def _untaken(ok: list[CandidateView], taken: list[str]) -> tuple[list[CandidateView], str]:
    """The members no other line is designing on (all of them where every one is), and what that left out."""
    free = [c for c in ok if c.id not in taken]
    if not free or len(free) == len(ok):
        return ok, ""
    return free, f" (other lines are designing on {', '.join(c.id for c in ok if c.id in taken)})"


def tournament(population: list[CandidateView], taken: list[str] = ()) -> Selection:
    ok = ranked(population)
    if not ok:
        seed = seed_of(population)
        return Selection(seed.id, None, f"no member is correct yet, so the base is the seed {seed.id}")
    free, aside = _untaken(ok, list(taken))
    base = free[0]
    reference, why = most_different(base, [c for c in ok if c is not base][:TOURNAMENT_TOP_K])
    members = f"{len(ok)} correct members" if len(ok) > 1 else "the only correct member"
    best = "has the best geomean" if base is ok[0] else "has the best geomean of the members left"
    text = f"base {base.id} {best}, {base.geomean_us:.2f} us ({members}){aside}"
    text += f"; {why}" if reference else "; no other correct member to compare with"
    return Selection(base.id, reference.id if reference else None, text)


def _children(population: list[CandidateView]) -> dict[str, list[CandidateView]]:
    """Children of each node in population order, which is the order they were attempted."""
    kids: dict[str, list[CandidateView]] = {}
    for c in population:
        if c.parent_id is not None:
            kids.setdefault(c.parent_id, []).append(c)
    return kids


def is_dead(node: CandidateView, children: list[CandidateView]) -> bool:
    """The last PRUNE_AFTER attempts from `node` all failed or came out slower than it."""
    recent = children[-PRUNE_AFTER:]
    return len(recent) == PRUNE_AFTER and all(not is_ok(c) or c.geomean_us >= node.geomean_us for c in recent)


def _lineage(node: CandidateView, by_id: dict[str, CandidateView], kids: dict[str, list[CandidateView]]) -> set[str]:
    """Ancestors and descendants of `node`, itself included: one branch of the tree."""
    line, up = {node.id}, node
    while up.parent_id in by_id and up.parent_id not in line:
        up = by_id[up.parent_id]
        line.add(up.id)
    stack = [node.id]
    while stack:
        for child in kids.get(stack.pop(), []):
            if child.id not in line:
                line.add(child.id)
                stack.append(child.id)
    return line


def tree_search(population: list[CandidateView], rng: random.Random, epsilon: float,
                taken: list[str] = ()) -> Selection:
    ok = ranked(population)
    if not ok:
        seed = seed_of(population)
        return Selection(seed.id, None, f"no member is correct yet, so the base is the seed {seed.id}")
    kids = _children(population)
    dead = [c for c in ok if is_dead(c, kids.get(c.id, []))]
    live = [c for c in ok if c.id not in {d.id for d in dead}]
    live, aside = _untaken(live, list(taken))
    pruned = f"; pruned as dead branches: {', '.join(c.id for c in dead)}" if dead else ""
    pruned += aside
    if not live:
        base = ok[0]
        how = f"every branch is pruned, so the best node {base.id} ({base.geomean_us:.2f} us) is expanded again"
    else:
        draw = rng.random()
        greedy = min(live, key=lambda c: (c.geomean_us, len(kids.get(c.id, []))))
        others = [c for c in live if c is not greedy]
        if draw < epsilon and others:
            base = rng.choice(others)
            how = (f"explore (draw {draw:.2f} < epsilon {epsilon:g}): {base.id} ({base.geomean_us:.2f} us, "
                   f"{len(kids.get(base.id, []))} attempts so far) drawn from {len(others)} other live nodes")
        else:
            base = greedy
            among = f"the fastest of {len(live)} live nodes" if len(live) > 1 else "the only live node"
            how = f"greedy (draw {draw:.2f} >= epsilon {epsilon:g}): {base.id} is {among} ({base.geomean_us:.2f} us)"
    by_id = {c.id: c for c in population}
    branch = _lineage(base, by_id, kids)
    elsewhere = [c for c in ok if c.id not in branch]
    reference = elsewhere[0] if elsewhere else None
    ref_text = (f"; reference {reference.id} is the best kernel on another branch ({reference.geomean_us:.2f} us)"
                if reference else "; every correct kernel is on the base's branch, so no reference")
    return Selection(base.id, reference.id if reference else None, how + ref_text + pruned)
