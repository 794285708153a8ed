"""Issue 39: what a request leaves open follows what it pins, a refusal never refuses what another default would
accept, and every refusal names pins that resolve (toolkit and Ubuntu included), or says what does instead."""
from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernellab.errors import ResolveError
from kernellab.image import resolve as resolving
from kernellab.image import targets
from kernellab.image.compat import covers
from kernellab.image.resolve import resolve
from kernellab.image.spec import Spec

M = targets.load()
GPUS = sorted(M.gpus)
CUDAS = sorted(M.cuda, key=targets.vkey)
TORCHES = sorted(M.torch, key=targets.vkey)
MINORS = sorted({".".join(t.split(".")[:2]) for t in TORCHES}, key=targets.vkey)


def runs_on(spec: Spec, gpus: list[str]) -> bool:
    if not spec.torch:
        return True
    archs = M.torch[spec.torch].archs[spec.torch_variant]
    return all(covers(archs, M.gpus[g].cc) for g in gpus)


def refused(**kw) -> ResolveError:
    with pytest.raises(ResolveError) as e:
        resolve(M, **kw)
    assert "\n" not in str(e.value)
    return e.value


# --------------------------------------------------------------------------- 1. the default CUDA follows the PyTorch pin

def test_a_pinned_torch_without_cuda_gets_the_cuda_of_its_own_wheel():
    s = resolve(M, gpu="a100", torch="1.8.1")
    assert (s.cuda, s.torch, s.torch_variant) == ("11.1", "1.8.1", "cu111")
    s = resolve(M, gpu="a100", torch="2.0.1+cu117")            # the wheel it names: CUDA 11.7, not 13.0
    assert (s.cuda, s.torch_variant, s.torch_requirement) == ("11.7", "cu117", "torch==2.0.1")
    assert resolve(M, gpu="h100", torch="2.0.1").cuda == "11.8"   # its cu118 wheel has sm_90, its cu117 none
    assert resolve(M, gpu="a100", torch="2.6").cuda == "12.6"
    # A release with a wheel for the newest CUDA keeps it: what resolved before still does, the same way.
    assert resolve(M, gpu="h100", torch="2.14").cuda == resolve(M, gpu="h100").cuda == "13.0"


def test_a_refusal_of_a_torch_pin_names_no_cuda_the_user_did_not_pin_as_the_reason():
    e = refused(gpu="h100", torch="1.8.1")
    assert "13.0" not in str(e) and "carry no kernels for H100 / H200" in str(e)
    assert e.pins == {"cuda": "11.8", "torch": "2.0.1"}


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPUS), torch=st.sampled_from([None, *MINORS, *(f"{t}+{v}" for t in TORCHES
                                                                      for v in M.torch[t].variants if v != "cpu")]),
       python=st.sampled_from([None, "3.6", "3.8", "3.10", "3.13"]), toolkit=st.sampled_from([None, "pip", "debian"]))
def test_without_cuda_a_request_resolves_whenever_some_cuda_would(gpu, torch, python, toolkit):
    """Leaving --cuda open never refuses what a --cuda would accept."""
    kw = dict(gpu=gpu, torch=torch, python=python, toolkit=toolkit)
    works = []
    with mock.patch.object(resolving, "nearest_pins", lambda matrix, req: None):   # only whether each resolves
        for cuda in CUDAS:
            try:
                works.append(resolve(M, cuda=cuda, **kw))
            except ResolveError:
                pass
    try:
        spec = resolve(M, **kw)
    except ResolveError as e:
        assert not works, (kw, [w.cuda for w in works], str(e))
        return
    assert runs_on(spec, [gpu])


# --------------------------------------------------------------------------- 2. an unpinned torch runs on the GPU

@pytest.mark.parametrize("gpu", GPUS)
def test_a_plain_request_for_any_gpu_resolves_to_a_wheel_that_runs_on_it(gpu):
    assert runs_on(resolve(M, gpu=gpu), [gpu])


def test_an_unpinned_torch_is_the_newest_with_the_toolkits_own_wheel_that_runs_on_the_gpu():
    s = resolve(M, gpu="p100")
    assert (s.cuda, s.torch, s.torch_variant) == ("12.6", "2.14.1", "cu126")   # no cu128 or cu129 wheel has sm_60
    s = resolve(M, gpu="v100", cuda="12.8")
    assert (s.torch, s.torch_variant) == ("2.10.0", "cu128")                   # 2.11's cu128 wheels dropped sm_70
    assert resolve(M, gpu="a100", cuda="13.0", python="3.10").torch == "2.14.1"  # 2.15 starts at Python 3.11


# --------------------------------------------------------------------------- 3. every refusal names pins or why not

def test_a_cuda_no_pytorch_publishes_wheels_for_names_pins_that_resolve():
    e = refused(gpu="a100", cuda="11.2")
    assert "no PyTorch release in the matrix publishes cu112 wheels" in str(e) and e.pins["cuda"] == "11.2"
    assert runs_on(resolve(M, gpu="a100", **e.pins), ["a100"])
    assert resolve(M, gpu="a100", cuda="11.2", torch="1.13.1").torch_variant == "cu117"


# --------------------------------------------------------------------------- 4. toolkit and Ubuntu are searched too

def test_the_os_follows_a_pinned_python():
    s = resolve(M, gpu="a100", torch="1.8.1", python="3.6")
    assert (s.cuda, s.os, s.python) == ("11.1", "ubuntu18.04", "3.6")


def test_a_toolkit_that_cannot_target_the_gpu_gets_another_toolkit_not_torch_none():
    for torch in (None, "none"):
        e = refused(toolkit="pip", cuda="13.0", gpu="v100", torch=torch)
        assert "--torch none (the toolkit alone)" not in str(e) and "drop a GPU" not in str(e)
        assert (e.pins["toolkit"], e.pins["cuda"]) == ("image", "12.9"), e.pins
        assert resolve(M, gpu="v100", **e.pins).kind == "cuda-image"
    assert refused(toolkit="pip", gpu="v100").pins["toolkit"] == "image"


def test_an_ubuntu_without_images_for_the_gpus_cudas_gets_the_nearest_ubuntu():
    e = refused(gpu="h100", ubuntu="18.04")
    assert e.pins["ubuntu"] == "20.04" and resolve(M, gpu="h100", **e.pins).os == "ubuntu20.04"
    assert str(e).startswith("no CUDA in the matrix fits the rest of the request, the nearest being 11.6: ")


def test_when_nothing_near_resolves_the_refusal_says_what_does_instead():
    msg = str(refused(gpu="b200", python="3.8"))
    assert "resolves with python 3.8" in msg and "the toolkit alone resolves: --cuda 13.0 --torch none" in msg
    assert resolve(M, gpu="b200", python="3.8", cuda="13.0", torch="none").python == "3.8"
    msg = str(refused(gpu=["k80", "b200"]))
    assert "without k80: --cuda 13.0" in msg and "without b200: --cuda 11.8" in msg and "drop a GPU" not in msg


# --------------------------------------------------------------------------- 5. a Python some OS has

def test_the_python_advised_is_the_nearest_an_os_has_and_it_resolves():
    msg = str(refused(gpu="a100", torch="2.15.0", python="3.10"))
    assert "use --python 3.11 " in msg
    assert resolve(M, gpu="a100", torch="2.15.0", python="3.11").python == "3.11"
    assert "use --python 3.9 " in str(refused(gpu="a100", torch="1.8.1", python="3.12"))


# --------------------------------------------------------------------------- 6. where a wheel comes from

def test_only_the_wheels_pypi_lacks_are_said_to_be_index_only():
    s = resolve(M, gpu="a100", cuda="11.3", torch="1.12.1")
    (note,) = [w for w in s.warnings if "index" in w]
    assert "PyTorch 1.12.1's cu113 wheel is only on PyTorch's own index" in note
    assert "PyPI's 1.12.1 is its cu102 build" in note
    assert not any("index" in w for w in resolve(M, gpu="a100", cuda="11.7", torch="1.13.1").warnings)  # PyPI's
    for t in ("1.8.0", "1.8.1", "1.9.1", "1.10.2", "1.11.0", "1.12.1"):
        assert M.torch[t].pypi_default == "cu102"


# --------------------------------------------------------------------------- 8. short first sentence, source last

def test_a_refusal_keeps_its_first_sentence_short_and_the_source_after_the_pins():
    msg = str(refused(cuda="12.8", gpu="b200", torch="2.6.0"))
    first, _, rest = msg.partition(". ")
    assert len(first) < 160 and "pytorch/pytorch#145616" not in first
    assert rest.startswith("The nearest pins that resolve and run on B200 / GB200: --cuda 12.8 --torch 2.7.1 (")
    assert rest.index("pytorch/pytorch#145616") > rest.index("--torch 2.7.1")
