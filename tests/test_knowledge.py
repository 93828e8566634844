"""The scientist's knowledge base: package notes, user folders, topic ordering and the budget."""

import re

import pytest

from kscience.scientist.knowledge import KnowledgeError, knowledge_for, list_notes, load_knowledge

PACKAGE_NOTES = ["triton.md", "hopper.md", "cdna3.md", "fp8_blockscale_gemm.md"]
BIG = 10**7  # a budget nothing reaches


def headers(text):
    return re.findall(r"^## (\S+\.md)$", text, re.M)


def test_all_four_package_notes_present_and_substantial():
    notes = dict(list_notes())
    assert list(notes)[:4] == PACKAGE_NOTES
    for name in PACKAGE_NOTES:
        assert notes[name] > 4000, f"{name} is too short to be useful"
    text = load_knowledge(budget_chars=BIG)
    assert headers(text) == PACKAGE_NOTES
    assert len(text) > sum(notes.values())  # headers added, nothing dropped


@pytest.mark.parametrize("name", PACKAGE_NOTES)
def test_note_length_and_no_stray_top_level_headers(name):
    text = load_knowledge(topics=[name.removesuffix(".md")], budget_chars=BIG)
    start = text.index(f"## {name}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else None]
    assert 60 <= body.count("\n") <= 210  # each note is 60-200 lines
    assert not re.search(r"^#{1,2} ", body.split("\n", 1)[1], re.M)  # own headings demoted below ##


def test_key_facts_are_in_the_notes():
    text = load_knowledge(budget_chars=BIG)
    for fact in ["132 SMs", "227 KB", "wgmma", "304", "wave64", "64 KB per CU", "240", "0x80",
                 "waves_per_eu", "matrix_instr_nonkdim", "kpack", "TRITON_INTERPRET", "tl.num_programs",
                 "split-K", "strides (1, M)", "not been verified on MI300 hardware"]:
        assert fact in text, fact


def blocks(text):
    """Each note's text by name, the left-out marker removed."""
    text = text.split("\n[knowledge:")[0]
    parts = re.split(r"^## (\S+\.md)$", text, flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2])}


def test_budget_drops_whole_notes_never_cutting_one():
    full = blocks(load_knowledge(budget_chars=BIG))
    for budget in (200, 3000, 12000, 24000):
        text = load_knowledge(budget_chars=budget)
        assert len(text) <= budget
        assert "left out" in text or budget < 300
        for name, body in blocks(text).items():
            assert body == full[name]  # every note present is there whole
    assert load_knowledge(budget_chars=0) == ""
    assert len(load_knowledge()) <= 32000


def test_knowledge_for_a_target_keeps_its_notes_whole_and_gives_writers_the_code_notes():
    designer, writer = knowledge_for([], ["cuda", "NVIDIA H100 80GB HBM3"], "fp8_blockscale_gemm")
    assert headers(designer) == ["fp8_blockscale_gemm.md", "hopper.md", "triton.md"]  # the problem's own first
    assert designer.split("\n")[-1] == ("[knowledge: left out: cdna3.md (about AMD (ROCm) hardware; the target "
                                        "is NVIDIA (CUDA))]")  # named as left out, with why, not cut
    assert headers(writer) == ["triton.md", "fp8_blockscale_gemm.md", "hopper.md"]
    designer, writer = knowledge_for([], ["rocm", "AMD Instinct MI300X"], "softmax")
    assert headers(designer)[0] == "cdna3.md" and "fp8_blockscale_gemm.md" not in headers(writer)
    # A KernelBench file whose name shares a word with a note does not get that note.
    _, writer = knowledge_for([], ["cpu"], "12_Gemm_Multiply_LeakyReLU")
    assert headers(writer) == ["triton.md"]


def test_notes_agree_with_the_seeds():
    """The fp8 seed widens to fp16 and has no UPCAST guard; the notes must not say otherwise."""
    from kscience.problems import load_problem

    seed = load_problem("fp8_blockscale_gemm").seed_source
    note = dict(_notes())["fp8_blockscale_gemm.md"]
    assert "UPCAST" not in seed and "Keep that guard" not in note
    assert ".to(tl.float16)" in seed and "widens both tiles to fp16" in note
    for name in ("matmul", "swiglu"):
        assert "UPCAST" in load_problem(name).seed_source


def _notes():
    from kscience.scientist.knowledge import _package_notes

    return _package_notes()


def test_topics_put_relevant_package_notes_first():
    text = load_knowledge(topics=["rocm", "fp8_blockscale_gemm"], budget_chars=BIG)
    assert headers(text) == ["cdna3.md", "fp8_blockscale_gemm.md", "triton.md", "hopper.md"]
    text = load_knowledge(topics=["NVIDIA H100 80GB HBM3"], budget_chars=BIG)
    assert headers(text)[0] == "hopper.md"
    small = load_knowledge(topics=["cuda"], budget_chars=12000)
    assert headers(small)[0] == "hopper.md" and "cdna3.md" not in headers(small)


def test_extra_folder_notes_appear(tmp_path):
    (tmp_path / "my_tricks.md").write_text("# Mine\n\nAlways try BLOCK_N=64 first.\n")
    (tmp_path / "ignored.txt").write_text("not a note")
    text = load_knowledge(extra_dirs=[tmp_path], budget_chars=BIG)
    assert "## my_tricks.md" in text and "Always try BLOCK_N=64 first." in text
    assert "not a note" not in text
    assert ("my_tricks.md", len("# Mine\n\nAlways try BLOCK_N=64 first.\n")) in list_notes([str(tmp_path)])
    # With topics, the user's notes come right after the relevant package notes.
    text = load_knowledge(extra_dirs=[tmp_path], topics=["cuda"], budget_chars=BIG)
    assert headers(text)[:2] == ["hopper.md", "my_tricks.md"]
    assert "Always try" in load_knowledge(extra_dirs=tmp_path, topics=["cuda"], budget_chars=12000)


def test_missing_folder_is_a_one_line_error(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(KnowledgeError) as info:
        load_knowledge(extra_dirs=[missing])
    assert str(missing) in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(KnowledgeError):
        list_notes([missing])
