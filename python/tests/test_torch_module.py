"""gphash.torch.EmbeddingBag against torch.nn.EmbeddingBag with the same weights."""
import pytest

import gphash

torch = pytest.importorskip("torch")
import gphash.torch as gt  # noqa: E402


def _devices():
    devs = ["cpu"]
    if gphash.has_cuda and torch.cuda.is_available():
        devs.append("cuda")
    return devs


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("include_last", [False, True])
def test_matches_torch_embedding_bag(pool_name, device, mode, include_last):
    weight = torch.randn(1000, 32)
    ours = gt.EmbeddingBag.from_pretrained(weight, mode, pool=pool_name, engine="gpu" if device == "cuda" else "cpu",
                                           cache_bytes=1 << 16, include_last_offset=include_last, replace=True)
    ref = torch.nn.EmbeddingBag.from_pretrained(weight, mode=mode, include_last_offset=include_last).to(device)
    ids = torch.randint(0, 1000, (600,), device=device)
    offsets = torch.tensor([0, 5, 5, 100, 400] + ([600] if include_last else []), device=device)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(ours(ids, offsets), ref(ids, offsets), rtol=1e-5, atol=1e-5)
        if not include_last:  # 2-D input: fixed-length bags, no offsets
            two_d = ids[:60].reshape(20, 3)
            torch.testing.assert_close(ours(two_d), ref(two_d), rtol=1e-5, atol=1e-5)
    ours.store.close()


def test_rejects_what_it_does_not_support(pool_name):
    with pytest.raises(gphash.Error):
        gt.EmbeddingBag(10, 4, "max", pool=pool_name, engine="cpu", replace=True)
    bag = gt.EmbeddingBag(10, 4, "sum", pool=pool_name, engine="cpu", replace=True)
    with pytest.raises(gphash.Error) as e:
        bag(torch.tensor([1, 2], dtype=torch.int32), torch.tensor([0]))
    assert e.value.field == "ids"
    with pytest.raises(gphash.Error):
        bag(torch.tensor([1, 2]), torch.tensor([0]), per_sample_weights=torch.ones(2))
    bag.store.close()


def test_cuda_graph_capture_of_a_lookup(pool_name):
    """A lookup captured in a CUDA graph and replayed gives the eager result (sizes fixed)."""
    if not (gphash.has_cuda and torch.cuda.is_available()):
        pytest.skip("needs a GPU and a CUDA build")
    weight = torch.randn(5000, 16)
    bag = gt.EmbeddingBag.from_pretrained(weight, "sum", pool=pool_name, cache_bytes=1 << 16, replace=True)
    ids = torch.randint(0, 5000, (4096,), device="cuda")
    offsets = torch.arange(0, 4096, 4, device="cuda")
    with torch.no_grad():
        bag(ids, offsets)  # warm: the session and the cache exist before the capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            bag(ids, offsets)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                out = bag(ids, offsets)
        except Exception as e:  # noqa: BLE001
            pytest.xfail(f"capture failed: {e}")
        ids.copy_(torch.randint(0, 5000, (4096,), device="cuda"))
        g.replay()
        torch.testing.assert_close(out, bag(ids, offsets), rtol=1e-5, atol=1e-5)
    bag.store.close()
