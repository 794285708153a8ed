"""Progress: a tqdm bar on a terminal, plain lines in a log (no timing: the clock is not consulted in lines mode)."""
from __future__ import annotations

import io

from kernellab import progress
from kernellab.image import builder


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_each_step_is_one_plain_line():
    out = io.StringIO()
    bar = progress.Bar(3, "bench", unit="case", out=out, lines=True)
    for label in ("softmax", "layernorm", "matmul"):
        bar.step(label)
    bar.close()
    assert out.getvalue().splitlines() == ["bench: 1/3 case softmax", "bench: 2/3 case layernorm",
                                           "bench: 3/3 case matmul"]


def test_byte_counts_in_a_log_say_the_total_once_finished_without_carriage_returns():
    out = io.StringIO()
    bar = progress.Bar(3_000_000, "export", unit="B", scale=True, out=out, every=1e9)
    bar.update_to(1_000_000)
    bar.update_to(3_000_000)
    text = out.getvalue()
    assert "\r" not in text and text.startswith("export: 3 MB/3 MB, ") and text.count("\n") == 1


def test_on_a_terminal_it_is_a_tqdm_bar_with_output_above_it():
    out = Terminal()
    bar = progress.Bar(4, "build", unit="step", out=out)
    assert bar.tty
    bar.update_to(2, "RUN pip install torch")
    bar.write("#7 [3/4] RUN pip install torch")
    bar.close()
    text = out.getvalue()
    assert "#7 [3/4] RUN pip install torch\n" in text and "2/4" in text and "build" in text


def test_a_build_log_passes_through_untouched_when_not_a_terminal():
    out = io.StringIO()
    steps = builder.BuildSteps(out)
    lines = ["#5 [1/3] FROM base\n", "#6 [2/3] RUN apt-get install gcc\n", "#6 0.5 Reading lists\n"]
    for line in lines:
        steps.write(line)
    steps.close()
    assert out.getvalue() == "".join(lines)


def test_build_steps_drive_a_bar_on_a_terminal_for_buildkit_and_podman_lines():
    for lines in (["#5 [stage-1 1/3] FROM base\n", "#6 [stage-1 2/3] RUN make\n"],
                  ["STEP 1/3: FROM base\n", "STEP 2/3: RUN make\n"]):
        out = Terminal()
        steps = builder.BuildSteps(out)
        for line in lines:
            steps.write(line)
        assert steps.bar is not None and steps.bar.total == 3 and steps.bar.done == 1
        steps.close()
        assert "RUN make" in out.getvalue()
