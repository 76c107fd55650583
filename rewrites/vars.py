"""Pattern variables shared by the rule files (names only; each rule binds its own)."""
from rewrites.pattern import FloatVar, IntVar, Var

x, y, z, g, w = Var("x"), Var("y"), Var("z"), Var("g"), Var("w")
a, b, k = IntVar("a"), IntVar("b"), IntVar("k")
n, m = IntVar("n", "size"), IntVar("m", "size")
t = IntVar("t", "tile")
c, d = FloatVar("c"), FloatVar("d")
