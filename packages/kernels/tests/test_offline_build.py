"""The offline builder's own behaviour: a refusal reported as its one-line reason, the
guard against the interpreter, and a failing child reported with its stderr."""

from __future__ import annotations

import pytest
from dsv4_kernels import offline_build


def test_the_reason_is_the_line_that_says_why() -> None:
    dump = ("Internal Triton PTX codegen error\n`ptxas` stderr:\nptxas x.ptx, line 9; error"
            "   : Instruction 'griddepcontrol' requires .target sm_90 or higher\n\n.version 8.8")
    assert offline_build.reason(dump).endswith("requires .target sm_90 or higher")
    assert offline_build.reason("at 1:0:\nValueError(\"type fp8e4nv not supported\")") == \
        'ValueError("type fp8e4nv not supported")'
    assert offline_build.reason("") == ""


def test_building_under_the_interpreter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET is set"):
        offline_build.build(None, {}, {}, (9, 0), 1)


def test_a_failing_child_is_an_error_with_its_stderr() -> None:
    with pytest.raises(RuntimeError, match=r"(?s)offline_build: json\.loads failed \(exit 1\).*JSONDecodeError"):
        offline_build.run_child("json", "loads", "not json")


def test_instructions_are_counted_by_their_whole_name() -> None:
    ptx = ("\tgriddepcontrol.wait;\n@%p1 ld.global.b16 { %rs1 }, [ %rd1 + 0 ];\n"
           "\tld.global.b16x2 %r1, [%rd2];\n\tld.global.v4.b32 { %r2, %r3, %r4, %r5 }, [%rd3];"
           "\n\tst.global.b8 [%rd4], %rs2;\n\tgriddepcontrol.wait;\n")
    assert offline_build.count_instructions(
        ptx, ("griddepcontrol.wait", "ld.global.b16", "ld.global.v4.b32", "st.global.b8",
              "st.global.b16", "ld.global")) == {
        "griddepcontrol.wait": 2, "ld.global.b16": 1, "ld.global.v4.b32": 1,
        "st.global.b8": 1, "st.global.b16": 0, "ld.global": 0}


def test_first_lines_keep_the_compilers_order() -> None:
    ptx = ("\tgriddepcontrol.launch_dependents;\n\tmov.b64 %rd1, %rd2;\n"
           "\tgriddepcontrol.wait;\n\tgriddepcontrol.wait;\n")
    assert offline_build.first_lines(
        ptx, ("griddepcontrol.wait", "griddepcontrol.launch_dependents", "st.global.b8")) == {
        "griddepcontrol.wait": 2, "griddepcontrol.launch_dependents": 0, "st.global.b8": -1}
