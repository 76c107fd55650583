"""The bounded float64 reference (ir/bounds.py): how it evaluates, beyond what the conformance
and verification tests check of its values."""


def test_broadcast_operands_are_computed_once_per_distinct_element(monkeypatch):
    """A softmax over rows broadcast 500 times along a new axis: every op of it runs on the
    500x smaller distinct part, with the same values and bounds as the full evaluation."""
    import numpy as np

    import compiler as saturn
    from ir import bounds
    g = saturn.trace(lambda x: (x.reshape(3, 1, 7).expand(3, 500, 7).softmax(-1) * 2.0).sum(1),
                     saturn.spec((3, 7)))
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    sizes = []
    finish = bounds._finish

    def spy(n, v, *rest, **kw):
        sizes.append(np.size(v))
        return finish(n, v, *rest, **kw)
    monkeypatch.setattr(bounds, "_finish", spy)
    (b,) = bounds.evaluate_bounded(g, [x])
    assert max(sizes) <= 3 * 7      # never the 3 x 500 x 7 broadcast
    s = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    want = 500 * 2.0 * s / s.sum(-1, keepdims=True)
    np.testing.assert_allclose(b.value, want, rtol=1e-6)    # (its constants are f32, as the program's)
    assert b.value.flags.writeable and np.all(b.bound > 0) and np.all(b.bound < 1e-3 * np.abs(want))
