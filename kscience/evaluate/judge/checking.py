"""Correctness, seen from the trusted side: a shape's output against the answer the judge computed itself.

A test shape's output comes back whole; a benchmark shape's is compared at ranges the judge draws once
the call has returned. Either way the inputs the candidate was given must come back untouched, and every
timed call's output is rechecked as the judge read it right after the call (drive.py). Answers are
computed here and nowhere else (`Session.expected`); a problem with its own check (GPU MODE's linalg
residuals, non-unique eigenvectors) judges an output with it instead of closeness to the reference.

A correct output's precision is measured here too, on the judge's own copy of the checked call's inputs:
its largest error against a float64 evaluation of the reference, beside the reference's own as published
(kscience.problems.precision says what they mark and how `--precision reference` judges them).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import time

import torch
from torch.overrides import TorchFunctionMode

from kscience.evaluate import result as R
from kscience.evaluate.judge import drive
from kscience.evaluate.judge.compare import check_output, gather, same_bits
from kscience.evaluate.judge.driving import CheckingSession, Look
from kscience.evaluate.judge.verdict import Verdict
from kscience.evaluate.wire import DTYPES
from kscience.problems import Problem, ProblemError, shape_label

OUTPUT_SLACK = 4  # an output may be this many times the answer's bytes before it is refused unread


def answer_or_size(session: CheckingSession, data: list, shape: dict) -> torch.Tensor:
    """The answer, or where the problem's own check judges an output alone (GPU MODE's linalg
    residuals), only the answer's size, from the reference on the meta device: the reference
    there is a factorisation as slow as the candidate's. Inputs or a reference that cannot
    run on the meta device give the answer itself."""
    if session.problem.checks_alone:
        with contextlib.suppress(ProblemError), session.phase("reference"):  # the meta device failed: fall through
            meta = session.problem.generate_input(0, "meta", **shape)
            return session.problem.ref_kernel(session.problem.call_data(list(meta)))
    return session.expected(data)


def output_cap(expected: torch.Tensor) -> int:
    """The most bytes an output may have before it is refused unread."""
    return max(OUTPUT_SLACK * expected.numel() * expected.element_size(), 1 << 20)


def check(session: CheckingSession, shape: dict, phase: str) -> tuple[R.ShapeResult, int]:
    """A correct output on fresh inputs, or a Verdict. Also returns the output cap for timing."""
    if phase == "benchmark" and session.problem.check is None:
        return check_sampled(session, shape)
    data, guarded, pristine, expected, cap = _checked_call(session, shape, whole=True)
    first = session.tensor("check", shape, cap)
    session.output_bytes = first.numel() * first.element_size()  # what the timed calls' buffer must hold
    looks = session.sample("check", shape, [first] + [pristine[i] for i in guarded])
    if looks[0] is None or not same_bits(looks[0], gather(first, session.ranges[0])):
        raise Verdict(R.WRONG_ANSWER, "the output changed after custom_kernel returned: "
                                      "work went on in the background (thread, process or stream)", shape)
    ok, why, err = judge_output(session.problem, data, first, expected)
    if not ok:
        raise Verdict(R.WRONG_ANSWER, _whole_why(session.problem, first, expected, why), shape)
    _untouched(session, guarded, pristine, looks[1:], shape)
    errors = float64_errors(session, data, first, expected)
    return R.ShapeResult(shape=shape, ok=True, phase=phase, max_abs_err=err, **errors), cap


def check_sampled(session: CheckingSession, shape: dict) -> tuple[R.ShapeResult, int]:
    """`check` for a benchmark shape: the output is compared at ranges the judge draws once the
    call returned (compare.CHECK_BLOCKS blocks, the first and last among them), not sent whole;
    the test shapes were checked whole. Each benchmark shape's timed calls are then read as
    soon as they return, which is where work landing after the return shows (drive.py)."""
    data, guarded, pristine, expected, cap = _checked_call(session, shape, whole=False)
    session.output_bytes = expected.numel() * expected.element_size()  # a right output has the answer's size
    looks = session.sample("check", shape, [expected] + [pristine[i] for i in guarded], edges=True)
    if looks[0] is None:
        raise Verdict(R.WRONG_ANSWER, f"output is not {str(expected.dtype).removeprefix('torch.')} "
                                      f"{list(expected.shape)} like the answer", shape)
    dtype, problem = expected.dtype, session.problem
    got, want = looks[0].view(dtype), gather(expected, session.ranges[0]).view(dtype)
    ok, why, err = check_output(got, want, problem.rtol, problem.atol)
    if not ok:
        raise Verdict(R.WRONG_ANSWER, _sampled_why(got, want, session.ranges[0], expected, problem, why)
                      or f"{why} (of the output's sampled elements)", shape)
    _untouched(session, guarded, pristine, looks[1:], shape)
    errors = float64_errors(session, data, looks[0].view(dtype), expected, session.ranges[0])
    return R.ShapeResult(shape=shape, ok=True, phase="benchmark", max_abs_err=err, **errors), cap


def _checked_call(session: CheckingSession, shape: dict,
                  whole: bool) -> tuple[list, list[int], dict, torch.Tensor, int]:
    """One call on inputs of a new seed: (data, guarded input indices, their pristine copies,
    the answer, the output cap), once the worker said which inputs it handed back."""
    kept = session.sets.take(shape_label(shape))
    if kept is None:
        seed = drive.new_seed(session.used_seeds)
        kept = seed, session.inputs(seed, shape)
    seed, data = kept
    guarded = [i for i, t in enumerate(data) if i not in session.problem.output_args and type(t) is torch.Tensor]
    pristine = {i: data[i].clone() for i in guarded}
    expected = answer_or_size(session, data, shape)
    cap = output_cap(expected)
    session.give_back_memory()
    t0 = time.monotonic()
    session.ask({"cmd": "check", "shape": shape, "seed": seed, "max_output_bytes": cap, "whole_output": whole},
                "check", shape)
    reply = session.reply("check", shape)
    session.check_call_s = time.monotonic() - t0
    if reply.get("inputs") != guarded:
        session.worker.kill()
        raise Verdict(R.REJECTED, "malformed check reply: wrong list of returned inputs", shape)
    return data, guarded, pristine, expected, cap


def _untouched(session: CheckingSession, guarded: list[int], pristine: dict, looks: list, shape: dict) -> None:
    for i, look, ranges in zip(guarded, looks, session.ranges[1:]):
        if look is None or not same_bits(look, gather(pristine[i], ranges)):
            raise Verdict(R.WRONG_ANSWER, f"input {i} was modified (only outputs {session.problem.output_args} "
                                          "may be written)", shape)


def judge_output(problem: Problem, data: list, out: torch.Tensor,
                 expected: torch.Tensor | None) -> tuple[bool, str, float]:
    """The problem's own check where it has one (answers that are right but not unique, such as
    eigenvectors; `expected` is then unused, or compared member by member where the answer is
    several tensors; None: the check computes it), else closeness to the reference. Either way
    NaN never passes."""
    if problem.check is None:
        return check_output(out, expected, problem.rtol, problem.atol)
    if out.is_floating_point() and bool(torch.isnan(out.float()).any()):
        return False, "output contains NaN (unwritten or computed)", float("inf")
    try:
        why = problem.check(problem.call_data(data), out, expected)
    except ProblemError:  # the problem's own reference failed (out of memory, say): not this output's fault
        raise
    except Exception as exc:  # the problem's checker failing on this output is a wrong answer
        why = f"the problem's check raised {type(exc).__name__}: {str(exc)[:200]}"
    return (False, f"problem check: {why}", float("nan")) if why else (True, "", float("nan"))


def recheck(session: CheckingSession, look: Look, shape: dict) -> None:
    """A timed call's output, as the judge read it from its own buffer right after the call, against the answer."""
    data = session.sets.recheck_inputs(look.seed)  # built ahead, its seed sent first to this call
    if data is None:
        data = session.inputs(look.seed, shape)
    if session.problem.check is not None:  # its own check, which may accept another dtype (pmpp-prefixsum's
        # float32 against a float64 reference), on the output read whole (see drive._ranges). It
        # computes what it needs itself: no reference call here (linalg's is a factorisation).
        out = look.raw.view(DTYPES[look.dtype]).reshape(look.shape)
        ok, why, _ = judge_output(session.problem, data, out, None)
        if not ok:
            raise Verdict(R.WRONG_ANSWER, f"a timed call returned a wrong result: {why.split(';')[0]}", shape)
        return
    want, problem = session.expected(data), session.problem
    if look.shape != list(want.shape) or look.dtype != str(want.dtype).removeprefix("torch."):
        ok, why = False, f"output {look.dtype} {look.shape}, expected {want.dtype} {list(want.shape)}"
    else:
        got, sampled = look.raw.view(want.dtype), gather(want, look.ranges).view(want.dtype)
        ok, why, _ = check_output(got, sampled, problem.rtol, problem.atol)
        why = (_sampled_why(got, sampled, look.ranges, want, problem, why) or why) if not ok else why
    if not ok:
        raise Verdict(R.WRONG_ANSWER, f"a timed call returned a wrong result: {why}", shape)


# --- precision ---------------------------------------------------------------------------------
_LOWER = (torch.float16, torch.bfloat16, torch.float32)  # promoted; fp8 casts are a problem's own semantics


class _InFloat64(TorchFunctionMode):
    """The reference as written, computed in float64: every cast or factory asking for fp32, bf16 or fp16
    gets float64 instead (the built-ins' `x.float()`, a KernelBench forward's `torch.zeros(..., dtype=...)`)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16):
            return args[0].to(torch.float64)
        if _lower(kwargs.get("dtype")):
            kwargs["dtype"] = torch.float64
        return func(*(torch.float64 if _lower(a) else a for a in args), **kwargs)


def _lower(value) -> bool:
    return isinstance(value, torch.dtype) and value in _LOWER


@contextlib.contextmanager
def _float64():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)  # factories given no dtype
    try:
        with _InFloat64(), torch.no_grad():
            yield
    finally:
        torch.set_default_dtype(default)


def _reference_module(problem: Problem) -> torch.nn.Module | None:
    """A KernelBench problem's reference model, as the judge built it from the secret weight seed (the
    judge's ref_kernel closes over it: evaluation._with_reference_weights); None for a function reference."""
    if not problem.kind.builds_model:
        return None
    found = inspect.getclosurevars(problem.ref_kernel).nonlocals.values()
    return next((v for v in found if isinstance(v, torch.nn.Module)), None)


def float64_answer(problem: Problem, data: list) -> torch.Tensor | str:
    """The reference on float64 copies of the floating-point inputs (a KernelBench model on a float64 copy
    of itself), or why there is none."""
    if problem.check is not None:
        return "the problem's own check judges its outputs"
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in data):
        return "no floating-point inputs"
    copies = [t.to(torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in data]
    module = _reference_module(problem)
    if problem.kind.builds_model and module is None:
        return "the judge's reference model was not found"
    try:
        with _float64():
            out = (copy.deepcopy(module).double()(*problem.call_data(copies)) if module is not None
                   else problem.ref_kernel(problem.call_data(copies)))
    except Exception as exc:  # an op without a float64 kernel (fp8 GEMMs), or no memory for the copies
        return f"the reference does not run in float64 ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
        got = out.dtype if isinstance(out, torch.Tensor) else type(out).__name__
        return f"the reference's float64 evaluation returned {str(got).removeprefix('torch.')}"
    return out


def float64_errors(session: CheckingSession, data: list, out: torch.Tensor, expected: torch.Tensor,
                   ranges: list[list[int]] | None = None) -> dict:
    """ShapeResult's precision fields for a correct output and the published answer `expected`: `out` is the
    whole output, or with byte `ranges` (drawn over the answer) its elements there. Their largest errors
    against the float64 answer on the same inputs, and that answer's largest magnitude; or why there are none."""
    try:
        with session.phase("reference"):
            exact = float64_answer(session.problem, data)
            if isinstance(exact, str):
                return {"f64_note": exact}
            if tuple(exact.shape) != tuple(expected.shape):
                return {"f64_note": f"the float64 answer has shape {tuple(exact.shape)}, the published one "
                                    f"{tuple(expected.shape)}"}
            published = expected.reshape(-1) if ranges is None else gather(expected, ranges).view(expected.dtype)
            exact = exact.reshape(-1) if ranges is None else _elements(exact, ranges, expected.element_size())
            finite = torch.isfinite(exact)
            if not bool(finite.any()):
                return {"f64_note": "the float64 answer has no finite element"}
            exact = exact[finite]
            got = out.reshape(-1).to(exact.device).double()[finite]
            published = published.to(exact.device).double()[finite]
            return {"err_f64": float((got - exact).abs().max()), "ref_err_f64": float((published - exact).abs().max()),
                    "scale_f64": float(exact.abs().max())}
    finally:
        session.give_back_memory()


def _elements(t: torch.Tensor, ranges: list[list[int]], item_bytes: int) -> torch.Tensor:
    """The elements of `t` at the byte ranges drawn over a tensor of its shape with `item_bytes` per element."""
    flat = t.reshape(-1)
    return torch.cat([flat[o // item_bytes:(o + n) // item_bytes] for o, n in ranges]) if ranges else flat[:0]


# --- what a wrong answer's message says ------------------------------------------------------------
def _outside(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float, what: str, where) -> str | None:
    """How many of `got`'s elements (`what`) lie outside the tolerance of `want` (same shape and dtype,
    no NaN: check_output says those), the first of them at `where(flat position)` with its value, the
    expected one and the threshold it crossed; None where none does."""
    g, w = got.reshape(-1).to(want.device).double(), want.reshape(-1).double()
    if g.shape != w.shape or bool(torch.isnan(g).any()):
        return None
    far = ~torch.isclose(g, w, rtol=rtol, atol=atol)
    if not bool(far.any()):
        return None
    i = int(torch.nonzero(far)[0])
    gi, wi = float(g[i]), float(w[i])
    return (f"{int(far.sum())} of {g.numel()} {what} outside rtol={rtol:g}, atol={atol:g}; first at {where(i)}: "
            f"got {gi:.6g}, expected {wi:.6g}: |got - expected| = {abs(gi - wi):.3g} > atol + rtol * |expected| "
            f"= {atol + rtol * abs(wi):.3g}")


def _whole_why(problem: Problem, got: torch.Tensor, want: torch.Tensor | None, why: str) -> str:
    """A whole output's wrong answer in full (check_output's reason where it is not about closeness:
    a shape, a dtype, NaN, or the problem's own check)."""
    if problem.check is not None or want is None or tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
        return why
    shape = tuple(want.shape)
    return _outside(got, want, problem.rtol, problem.atol, "output elements",
                    lambda i: tuple(int(x) for x in torch.unravel_index(torch.tensor(i), shape)) if shape else ()) or why


def _sampled_why(got: torch.Tensor, sampled: torch.Tensor, ranges: list[list[int]], answer: torch.Tensor,
                 problem: Problem, why: str) -> str | None:
    """A sampled output's wrong answer in full, its first bad element named by its index in the output (the
    sample holds the bytes at `ranges` of the answer's contiguous layout); None where the reason is not
    about closeness."""
    if got.dtype != sampled.dtype or got.numel() != sampled.numel():
        return None
    size, shape = sampled.element_size(), tuple(answer.shape)

    def where(i: int) -> tuple:
        seen = 0
        for offset, length in ranges:
            n = length // size
            if i < seen + n:
                flat = offset // size + i - seen
                return tuple(int(x) for x in torch.unravel_index(torch.tensor(flat), shape)) if shape else ()
            seen += n
        return (i,)

    return _outside(got, sampled, problem.rtol, problem.atol, "sampled elements of the output", where)
