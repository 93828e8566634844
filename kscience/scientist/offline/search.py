"""The offline scientist's knob search: plain autotuning over the knobs the seed declares.

Ask/tell without state of its own: every call is given all the configurations measured so far
(the kernels the scientist has seen in its briefs, with their geomean times) and proposes the next
`n` distinct legal configurations never measured. Two searches, and the run says which one ran:

- "optuna-tpe": Optuna's TPE sampler (Bergstra et al., 2011; Akiba et al., 2019), multivariate,
  seeded from the run's seed and the number of observations, with the measured configurations
  added as finished trials. A configuration that failed counts as twice the slowest correct time,
  so the sampler learns to avoid its region. Until STARTUP configurations are measured TPE has
  nothing to model, and random draws land far from the seed (1.3-28x slower than it on matmul and
  SwiGLU), which a short run cannot afford; so those first proposals are the random+local ones
  below: the seed's neighbours first.
- "exhaustive" (a space of at most `n` unmeasured legal configurations left) or "random+local"
  (Optuna not installed): half of each batch are the best configuration's untried neighbours (one
  knob one step away), the rest uniform draws from the legal space.

Both are deterministic for a given seed and history, and neither forgets the best configuration:
it is always the base the next proposals are written onto.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kscience.scientist.offline.space import KnobSpace

try:  # the `offline` extra; without it the search falls back to random+local
    import optuna
except ImportError:  # pragma: no cover - depends on the environment
    optuna = None

STARTUP = 6  # random configurations before TPE models the results (two rounds of three)
FAILED_PENALTY = 2.0  # a failed configuration counts as this multiple of the slowest correct time
MAX_DRAWS = 400  # samples drawn per batch before the search settles for fewer proposals


@dataclass(frozen=True)
class Observation:
    config: tuple[tuple[str, int], ...]  # (knob, value) in the space's order
    geomean_us: float | None  # None: the kernel failed


def search_name() -> str:
    return "optuna-tpe" if optuna is not None else "random+local"


def _key(config: dict[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(config.items())


def best_of(observations: list[Observation]) -> Observation | None:
    ok = [o for o in observations if o.geomean_us]
    return min(ok, key=lambda o: o.geomean_us) if ok else None


def propose(space: KnobSpace, observations: list[Observation], n: int, seed: int,
            method: str | None = None, exclude: list[dict[str, int]] = ()) -> tuple[list[dict[str, int]], str]:
    """Up to `n` distinct legal configurations neither observed nor in `exclude` (under way elsewhere),
    and the name of the search that chose them."""
    seen = {o.config for o in observations}
    seen |= {tuple((name, c[name]) for name in space.names) for c in exclude if all(name in c for name in space.names)}
    if not space.knobs or n <= 0:
        return [], "none"
    listed = space.legal_configs()
    if listed is not None:
        left = [c for c in listed if _key(c) not in seen]
        if len(left) <= n:
            return left, "exhaustive"
    method = method or search_name()
    rng = random.Random(f"{seed}:{len(observations)}")
    if method == "optuna-tpe" and len(observations) >= STARTUP:
        chosen = _tpe(space, observations, n, seed, seen)
        if len(chosen) < n:  # TPE kept drawing measured configurations: top up at random
            chosen += _random_local(space, observations, n - len(chosen), rng, seen | {_key(c) for c in chosen})
        return chosen, method
    if method == "optuna-tpe":  # too few measurements for TPE to model yet: start near the best
        return _random_local(space, observations, n, rng, seen), method
    return _random_local(space, observations, n, rng, seen), "random+local"


def _random_local(space: KnobSpace, observations: list[Observation], n: int, rng: random.Random,
                  seen: set) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    taken = set(seen)

    def take(config: dict[str, int] | None) -> None:
        if config is not None and _key(config) not in taken and len(out) < n:
            out.append(config)
            taken.add(_key(config))

    best = best_of(observations)
    if best is not None:
        near = space.neighbours(dict(best.config))
        rng.shuffle(near)
        for config in near[:n // 2 + n % 2]:
            take(config)
    for _ in range(MAX_DRAWS):
        if len(out) >= n:
            break
        take(space.random_config(rng))
    return out


def _tpe(space: KnobSpace, observations: list[Observation], n: int, seed: int, seen: set) -> list[dict[str, int]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists = {name: optuna.distributions.CategoricalDistribution(space.values[name]) for name in space.names}
    sampler = optuna.samplers.TPESampler(seed=(seed * 1_000_003 + len(observations)) % 2**31, multivariate=True,
                                         constant_liar=True, n_startup_trials=STARTUP)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    times = [o.geomean_us for o in observations if o.geomean_us]
    worst = max(times) * FAILED_PENALTY if times else None
    for o in observations:
        params = dict(o.config)
        if any(params.get(name) not in space.values[name] for name in space.names):
            continue  # measured outside the space (a repair or a structural move changed it)
        value = o.geomean_us or worst
        state = optuna.trial.TrialState.COMPLETE if value else optuna.trial.TrialState.FAIL
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value, state=state)
                        if value else optuna.trial.create_trial(params=params, distributions=dists, state=state))
    out: list[dict[str, int]] = []
    taken = set(seen)
    for _ in range(MAX_DRAWS):
        if len(out) >= n:
            break
        trial = study.ask(dists)
        config = {name: trial.params[name] for name in space.names}
        if _key(config) in taken or not space.is_legal(config):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        out.append(config)
        taken.add(_key(config))  # left running: the constant liar steers the next asks away from it
    return out
