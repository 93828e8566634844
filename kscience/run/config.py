"""Every setting of a run, declared once: its type, default, help text and command-line flag.

`RunConfig` is stored with each run. The `kscience run` / `kscience resume` flags, the arguments
of `%%kernel_evolve` and `%kscience run`, and the keywords of `kscience.jupyter.evolve` are all
generated from its fields, so a new setting is one `setting(...)` line here:

    target: str | None = setting(None, "--target", "device the scientist writes for", metavar="DEVICE")

`on_resume=True` lets `resume` change the setting of a stored run; everything else is fixed once
the run exists, because the run's stored candidates were judged under it.
"""

from __future__ import annotations

import sys
from dataclasses import MISSING, asdict, dataclass, field, fields

from kscience.evaluate.executors.factory import EXECUTORS, valid_executor
from kscience.evaluate.executors.queue_dir import queue_directory
from kscience.evaluate.result import BUILD_LIMIT_S
from kscience.problems.precision import DEFAULT_POLICY, POLICIES
from kscience.run.limits import STEP_LIMIT_FACTOR, STEP_LIMIT_FLOOR_S
from kscience.run.profiling import PROFILERS
from kscience.scientist.plans import CHOOSERS, PLANS_PER_LINE
from kscience.scientist.rules import judge_limits_text
from kscience.scientist.llm import LLM_RETRIES, LLM_TIMEOUT_S
from kscience.scientist.llm.factory import default_llm_spec
from kscience.scientist.llm.providers import model_specs
from kscience.record.store import DEFAULT_DB

STRATEGIES = ("llm", "tree", "tournament")
DEFAULT_ITERATIONS = 3  # where neither --iterations nor --evaluations is given
PROBLEM_HELP = "built-in name, KernelBench .py file or GPU MODE directory"


class ConfigError(ValueError):
    """A setting that cannot be used, in one line."""


@dataclass(frozen=True)
class Setting:
    """What the command line and the magics need to offer one RunConfig field.

    kind: "value" (--flag VALUE), "append" (repeatable, a list), "pairs" (repeatable NAME=VALUE,
    a dict) or "off" (--flag sets the field to False; unset leaves the default)."""

    flag: str | None  # None: not a flag (the problem is a positional argument)
    help: str
    metavar: str | None = None
    on_resume: bool = False  # `resume` may change it
    kind: str = "value"
    choices: tuple | None = None
    resume_help: str | None = None  # the help `resume` gives, where it means something else there


SETTING = "kscience"  # the key under which a RunConfig field's metadata holds its Setting


def setting(default, flag: str | None, help: str, **offered):
    """A RunConfig field with its Setting (`offered`: Setting's other fields)."""
    meta = {SETTING: Setting(flag, help, **offered)}
    if isinstance(default, (list, dict)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


def setting_of(f) -> Setting:
    """The Setting of a RunConfig field (dataclasses.Field)."""
    return f.metadata[SETTING]


@dataclass
class RunConfig:
    """Everything that decides what a run does. Stored as the run's config; never holds a key."""

    problem: str = setting(None, None, PROBLEM_HELP)  # a positional argument, not a flag
    # An iteration is one design: a line's select -> design and its chosen experiments (PLANS_PER_LINE).
    iterations: int | None = setting(None, "--iterations", f"iterations (designs, each with up to {PLANS_PER_LINE} "
                                     "experiments) the run aims for in total; given --evaluations alone, as "
                                     f"many as that budget allows (default {DEFAULT_ITERATIONS})", metavar="N",
                                     on_resume=True,
                                     resume_help="iterations to add (default: what remains of the run's target)")
    # Candidate kernels judged (seed, children, repairs; not the baselines): the budget a user thinks in.
    evaluations: int | None = setting(None, "--evaluations", "stop once this many candidate kernels were "
                                      "evaluated in total (the run's work in flight is finished or kept "
                                      "for resume)", metavar="N", on_resume=True)
    # Lines of work at once, each one iteration on its own clock: while the model thinks for one line,
    # the others' kernels keep the evaluator busy.
    lines: int | None = setting(None, "--lines", "iterations kept going at once, each on its own clock "
                                "(default: one per evaluation slot)", metavar="K", on_resume=True)
    name: str = setting("", "--name", "a label for the run")
    llm: str = setting("offline", "--llm", "offline (no model: knob search and known rewrites), "
                       f"{model_specs(', ')}, or scripted (a stand-in model: a dry run of the model path, no key "
                       "needed) (default: chosen from the API keys set)", metavar="ID", on_resume=True)
    base_url: str | None = setting(None, "--base-url", "endpoint of an OpenAI-compatible or Gemini server "
                                   "(default: the provider's own, or $OPENAI_BASE_URL)", metavar="URL",
                                   on_resume=True)
    strategy: str | None = setting(None, "--strategy", "how the base kernel is picked (default: tournament "
                                   "offline, llm otherwise)", choices=STRATEGIES, on_resume=True)
    # Who picks the three plans of a round: the paper's rule over the designer's own scores, or the loop
    # from the designer's predictions (by upside and distance from plans tried), to compare the two.
    chooser: str = setting("paper", "--chooser", "who picks the plans carried out: paper (most innovative, "
                           "highest predicted max and min, as the designer scored them) or loop (by predicted "
                           "upside and distance from plans tried)", choices=CHOOSERS, on_resume=True)
    repairs: int = setting(2, "--repairs", "repair attempts per broken candidate", metavar="K", on_resume=True)
    executor: str = setting("local", "--executor", f"where candidates are judged: {EXECUTORS}", metavar="SPEC",
                            on_resume=True)
    gpus: int | None = setting(None, "--gpus", "evaluate on at most N GPUs at once", metavar="N", on_resume=True)
    knowledge: list[str] = setting([], "--knowledge", "folder of *.md notes for the designer (repeatable)",
                                   metavar="DIR", kind="append")
    seed: int = setting(0, "--seed", "random seed of the scientist's choices (the starting kernel is "
                        "--seed-kernel)", metavar="N")
    overrides: dict = setting({}, "--set", "override a module-level constant of a KernelBench file",
                              metavar="NAME=VALUE", kind="pairs")
    max_cost_usd: float | None = setting(None, "--max-cost-usd", "stop once the LLM calls cost this much",
                                         metavar="USD", on_resume=True)
    max_tokens: int | None = setting(None, "--max-tokens", "stop once the LLM calls used this many tokens",
                                     metavar="N", on_resume=True)
    # Per session: a resumed run gets the full limit again.
    time_limit_s: float | None = setting(None, "--time-limit", "stop this session after this long",
                                         metavar="SECONDS", on_resume=True)
    # None: derived from the seed's own evaluation (kscience.run.limits.step_limit), so a hung candidate
    # costs a small multiple of what a working one takes rather than the judge's full limits.
    eval_timeout_s: float | None = setting(None, "--eval-timeout", "the longest the judge waits for a candidate "
                                           "in one step (importing it, checking a shape, timing a shape); "
                                           f"default: {STEP_LIMIT_FACTOR:g}x the seed's slowest step, at least "
                                           f"{STEP_LIMIT_FLOOR_S:g} s, at most the judge's own limits "
                                           f"({judge_limits_text()})", metavar="SECONDS",
                                           on_resume=True)
    # Seconds a compiler (nvcc, ptxas, ninja, c++) runs in the worker count against neither the step limit
    # nor the judge's own limits, up to this much per step (kscience/evaluate/judge/builds.py).
    build_limit_s: float = setting(BUILD_LIMIT_S, "--build-limit", "the longest one step may go on while a "
                                   "compiler runs in the judge's worker (load_inline, nvcc, Triton's ptxas), on "
                                   f"top of --eval-timeout (default {BUILD_LIMIT_S:.0f} s)", metavar="SECONDS",
                                   on_resume=True)
    llm_retries: int = setting(LLM_RETRIES, "--llm-retries", "retries of a failed LLM request", metavar="N",
                               on_resume=True)
    llm_timeout_s: float = setting(LLM_TIMEOUT_S, "--llm-timeout", "limit per LLM request", metavar="SECONDS",
                                   on_resume=True)
    # None: time torch.compile of the reference when the seed was judged on a GPU.
    compiled_baseline: bool | None = setting(None, "--no-compiled-baseline", "do not time torch.compile of the "
                                             "eager PyTorch baseline (timed by default on a GPU)", kind="off")
    target: str | None = setting(None, "--target", "hardware the kernels are for, e.g. h100 or mi300x "
                                 "(default: the device the run evaluates on)", metavar="GPU")
    # Nsight Compute on the seed and on each new best, outside the timed evaluation (a stored config of an
    # older run says None: off).
    profile: str | None = setting("auto", "--profile", "hardware counters of the seed and of each new best "
                                  "(Nsight Compute; its cost is shown, never timed); auto: where the judging "
                                  "machine has ncu; none: off",
                                  choices=PROFILERS, on_resume=True)
    # What a correct answer's precision must be (kscience.problems.precision): fixed once the run exists,
    # since its stored verdicts were judged under it.
    precision: str = setting(DEFAULT_POLICY, "--precision", "tolerance: within the problem's rtol/atol is "
                             "correct, as KernelBench judges, and a kernel far less precise than the reference "
                             "is marked reduced precision; reference: such a kernel is a wrong answer "
                             "(default tolerance)", choices=POLICIES)
    stop_at_sol: float | None = setting(None, "--stop-at-sol", "end the run once its best kernel reaches this "
                                        "fraction of the roofline bound on every shape, e.g. 0.8", metavar="F",
                                        on_resume=True)

    def __post_init__(self):
        if not self.problem:
            raise ConfigError("a run needs a problem")
        if self.strategy is None:
            self.strategy = "tournament" if self.llm.partition("@")[0] == "offline" else "llm"
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"unknown strategy {self.strategy!r}: use {', '.join(STRATEGIES)}")
        if not valid_executor(self.executor):
            raise ConfigError(f"unknown executor {self.executor!r}: use {EXECUTORS}")
        if self.executor.startswith("queue:"):  # absolute, so a resume from elsewhere finds the same queue
            self.executor = "queue:" + queue_directory(self.executor)
        if self.iterations is None:  # an evaluation budget alone bounds the run: a design yields at least one
            self.iterations = DEFAULT_ITERATIONS if self.evaluations is None else self.evaluations
        for flag, value, least in (("--iterations", self.iterations, 0), ("--repairs", self.repairs, 0),
                                   ("--evaluations", self.evaluations, 1), ("--lines", self.lines, 1),
                                   ("--gpus", self.gpus, 1)):
            if value is not None and value < least:  # one wording for every count a user sets
                raise ConfigError(f"{flag} must be at least {least}, not {value}")
        if self.eval_timeout_s is not None and self.eval_timeout_s <= 0:
            raise ConfigError(f"--eval-timeout must be a positive number of seconds, not {self.eval_timeout_s:g}")
        if self.precision not in POLICIES:
            raise ConfigError(f"unknown precision policy {self.precision!r}: use {', '.join(POLICIES)}")
        if self.profile is not None and self.profile not in PROFILERS:
            raise ConfigError(f"unknown profiler {self.profile!r}: use {', '.join(PROFILERS)}")
        if self.stop_at_sol is not None and not 0 < self.stop_at_sol <= 1:
            raise ConfigError(f"--stop-at-sol is a fraction of speed of light in (0, 1], e.g. 0.8; "
                              f"not {self.stop_at_sol:g}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RunConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


SETTINGS = tuple(f.name for f in fields(RunConfig) if setting_of(f).flag)  # what a user may set by flag
RESUMABLE = tuple(f.name for f in fields(RunConfig) if setting_of(f).on_resume)


def _default_text(f) -> str:
    default = f.default if f.default is not MISSING else None
    if setting_of(f).kind != "value" or default in (None, "") or "default" in setting_of(f).help:
        return ""
    return f" (default {default:g})" if isinstance(default, float) else f" (default {default})"


def option_specs(*, resume: bool = False, helps: dict | None = None) -> list[tuple[tuple[str, ...], dict]]:
    """(flags, argparse keywords) of every setting, for `kscience run` or (resume=True) what
    `kscience resume` may change. Every default is None, meaning "not given": the config's own
    default, or on resume the stored value, applies. `helps` rewords a setting's help (by field name)."""
    specs = []
    for f in fields(RunConfig):
        offered = setting_of(f)
        if not offered.flag or (resume and not offered.on_resume):
            continue
        if helps and f.name in helps:
            help_ = helps[f.name]
        elif resume:  # unset, a resumed run keeps what it had
            help_ = offered.resume_help or offered.help.split(" (default")[0] + " (default: as the run had it)"
        else:
            help_ = offered.help + _default_text(f)
        if offered.kind == "off":
            how = {"action": "store_false"}
        else:
            how = ({"action": "append"} if offered.kind in ("append", "pairs") else
                   {"choices": offered.choices} if offered.choices else {"type": _type_of(f)})
            how.update({"metavar": offered.metavar} if offered.metavar else {})
        specs.append(((offered.flag,), {"dest": f.name, "default": None, "help": help_, **how}))
    return specs


def _type_of(f):
    text = str(f.type)
    return int if text.startswith("int") else float if text.startswith("float") else str


def add_db_option(parser) -> None:
    parser.add_argument("--db", default=None, metavar="PATH",
                        help=f"SQLite file (default: $KSCIENCE_DB or ./{DEFAULT_DB})")


def add_run_arguments(parser) -> None:
    """What `kscience run` and `%kscience run` take: the problem, a starting kernel, every setting."""
    parser.add_argument("problem", help=PROBLEM_HELP)
    parser.add_argument("--seed-kernel", metavar="FILE",
                        help="starting kernel file (default: the problem's own, as `kscience seed` prints it)")
    add_run_options(parser)
    add_db_option(parser)


def add_resume_arguments(parser) -> None:
    """What `kscience resume` and `%kscience resume` take: the run and the settings a resume may change."""
    parser.add_argument("run_id", metavar="RUN_ID", help="a run's id, as `kscience runs` lists it (r-...)")
    add_run_options(parser, resume=True)
    parser.add_argument("--force", action="store_true",
                        help="resume a run marked running by a process this host cannot see (another machine)")
    add_db_option(parser)


def add_setting_option(parser, name: str, default_help: str) -> None:
    """One setting's flag on a command that is no run (`kscience eval` takes --eval-timeout), so both take
    the same flag with the same meaning; `default_help` says what that command does without it."""
    f = next(f for f in fields(RunConfig) if f.name == name)
    (flags, kw), = [(flags, kw) for flags, kw in option_specs() if flags == (setting_of(f).flag,)]
    meaning = setting_of(f).help.split("; default")[0].split(" (default")[0]
    # f.default: there is no run to supply it
    parser.add_argument(*flags, **{**kw, "default": f.default, "help": f"{meaning}; default: {default_help}"})


def add_run_options(parser, *, resume: bool = False, helps: dict | None = None) -> None:
    """Every setting's flag on `parser`; `helps` rewords a setting's help where a command means it
    differently (a campaign's --name labels the campaign, its budgets apply per problem)."""
    for flags, kw in option_specs(resume=resume, helps=helps):
        parser.add_argument(*flags, **kw)


def parse_sets(pairs: list[str] | None) -> dict:
    """NAME=VALUE pairs (from repeated --set) as a dict."""
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise ConfigError(f"--set expects NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def options_from_args(args) -> dict:
    """The settings given on a parsed command line (or magic line), as RunConfig field values."""
    out = {}
    for f in fields(RunConfig):
        value = getattr(args, f.name, None) if setting_of(f).flag else None
        if value is None:
            continue
        out[f.name] = parse_sets(value) if setting_of(f).kind == "pairs" else value
    return out


def check_resume_changes(changes: dict) -> None:
    """A resumed run may change only the settings marked on_resume."""
    fixed = sorted(set(changes) - set(RESUMABLE))
    if fixed:
        raise ConfigError(f"a resumed run keeps its {', '.join(fixed)}: only {', '.join(RESUMABLE)} can change")


def check_settings(options: dict) -> None:
    unknown = sorted(set(options) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}: use {', '.join(SETTINGS)}")


def new_config(problem: str, options: dict, *, say_choice: bool = True) -> RunConfig:
    """A RunConfig from keyword settings; without `llm`, the model is chosen from the API keys set, and
    the choice is said on stderr once the settings are valid (`say_choice=False`: the caller says it,
    with `llm_choice`, once the run exists, so an error is never preceded by it)."""
    check_settings(options)
    reason = llm_choice(options)
    config = RunConfig(problem=problem, **{**options, "llm": options.get("llm") or default_llm_spec()[0]})
    if reason and say_choice:
        print(f"kscience: {reason}", file=sys.stderr)
    return config


def llm_choice(options: dict) -> str | None:
    """Why this model, when the settings leave it to the API keys set; None when they name one."""
    return None if options.get("llm") is not None else default_llm_spec()[1]
