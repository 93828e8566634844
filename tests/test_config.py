"""Every run setting is declared once (kscience.run.config.RunConfig) and reaches a run the same way
from `kscience run`, `kscience resume`, `%%kernel_evolve` and `%kscience run`."""

from dataclasses import fields

import pytest
from IPython.core.magic_arguments import parse_argstring

from kscience.cli.main import build_parser
from kscience.run.config import (RESUMABLE, ConfigError, RunConfig, check_resume_changes, new_config,
                             options_from_args, setting_of)
from kscience.jupyter.magics import KscienceMagics

# Values that must be valid, and what they become; any other setting gets one from its type.
SAMPLES = {"llm": ("offline", "offline"), "strategy": ("tree", "tree"), "executor": ("ray", "ray"),
           "overrides": ("N=5", {"N": "5"}), "llm_timeout_s": ("30", 30.0),
           "profile": ("ncu", "ncu"), "stop_at_sol": ("0.8", 0.8), "chooser": ("loop", "loop"),
           "precision": ("reference", "reference")}
CLI_ONLY = {"--seed-kernel", "--json", "--help", "-h"}  # a cell body is the kernel; JSON is for the terminal
MAGIC_ONLY = {"--output", "-o", "--resume", "--force", "--view", "--help", "-h"}
FLAGGED = [f for f in fields(RunConfig) if setting_of(f).flag]


def _magic_parser():
    return KscienceMagics.kernel_evolve.parser


def _options(parser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _run_parser():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["run"], sub.choices["resume"]


def _sample(f) -> tuple[str | None, object]:
    """(the word after the flag, or None for a switch; the value RunConfig should then hold)."""
    if f.name in SAMPLES:
        return SAMPLES[f.name]
    kind, type_ = setting_of(f).kind, str(f.type)
    if kind == "off":
        return None, False
    if kind == "append":
        return "notes", ["notes"]
    if type_.startswith("int"):
        return "7", 7
    if type_.startswith("float"):
        return "2.5", 2.5
    return "text", "text"


def _words(f) -> list[str]:
    word = _sample(f)[0]
    return [setting_of(f).flag] + ([] if word is None else [word])


@pytest.mark.parametrize("f", FLAGGED, ids=lambda f: f.name)
def test_each_run_flag_reaches_runconfig_from_the_cli_and_the_magic(f):
    expected = _sample(f)[1]
    cli = options_from_args(build_parser().parse_args(["run", "softmax", *_words(f)]))
    magic = options_from_args(parse_argstring(KscienceMagics.kernel_evolve, " ".join(["softmax", *_words(f)])))
    assert cli == magic == {f.name: expected}
    config = RunConfig(problem="softmax", **cli)
    assert getattr(config, f.name) == expected
    assert RunConfig.from_dict(config.to_dict()) == config  # and survives the store


def test_the_cli_and_the_magic_offer_the_same_run_options():
    run, _ = _run_parser()
    cli, magic = _options(run), _options(_magic_parser())
    assert cli - CLI_ONLY == magic - MAGIC_ONLY
    assert {setting_of(f).flag for f in FLAGGED} <= cli & magic


def test_defaults_and_help_come_from_runconfig():
    run, _ = _run_parser()
    by_dest = {a.dest: a for a in run._actions}
    for f in FLAGGED:
        action = by_dest[f.name]
        assert action.default is None  # "not given": RunConfig's default (or the stored value) applies
        assert setting_of(f).help.split(" (")[0] in action.help
    assert "(default 3)" in by_dest["iterations"].help and "(default 120)" in by_dest["llm_timeout_s"].help
    magic = {a.dest: a for a in _magic_parser()._actions}
    assert all(magic[f.name].help == by_dest[f.name].help for f in FLAGGED)


def test_no_flag_given_means_runconfig_defaults():
    args = build_parser().parse_args(["run", "softmax"])
    assert options_from_args(args) == {}
    config = RunConfig(problem="softmax")
    assert (config.iterations, config.repairs, config.llm_timeout_s, config.compiled_baseline) == (3, 2, 120.0, None)


@pytest.mark.parametrize("f", [f for f in FLAGGED if setting_of(f).on_resume], ids=lambda f: f.name)
def test_each_resumable_flag_reaches_the_resumed_run(f):
    _, resume = _run_parser()
    args = build_parser().parse_args(["resume", "r-1", *_words(f)])
    assert options_from_args(args) == {f.name: _sample(f)[1]}
    assert setting_of(f).flag in _options(resume)


def test_resume_offers_exactly_the_resumable_settings():
    _, resume = _run_parser()
    offered = {a.dest for a in resume._actions if a.option_strings} - {"help", "db", "json", "force"}
    assert offered == set(RESUMABLE)


def test_a_setting_fixed_at_creation_cannot_change_on_resume():
    check_resume_changes({"llm": "offline", "repairs": 1})
    with pytest.raises(ConfigError, match="keeps its knowledge, seed"):
        check_resume_changes({"seed": 1, "knowledge": ["x"], "llm": "offline"})


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="unknown setting"):
        new_config("softmax", {"iteratoins": 2})
    with pytest.raises(ConfigError, match="unknown executor 'slurm'"):
        RunConfig(problem="softmax", executor="slurm")
    with pytest.raises(ConfigError, match="--set expects NAME=VALUE"):
        options_from_args(build_parser().parse_args(["run", "softmax", "--set", "N5"]))
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ConfigError, match="stop-at-sol is a fraction of speed of light"):
            RunConfig(problem="softmax", stop_at_sol=bad)
    with pytest.raises(ConfigError, match="unknown profiler 'nsys'"):
        RunConfig(problem="softmax", profile="nsys")


def test_without_llm_the_model_is_chosen_from_the_keys_and_said(monkeypatch, capsys):
    for key in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(key, raising=False)
    assert new_config("softmax", {}).llm == "offline"
    assert "using the offline scientist" in capsys.readouterr().err
