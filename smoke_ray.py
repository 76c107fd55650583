import time, numpy as np, sys
import ray
import compiler as saturn
from compiler.cluster import Ray
from compiler.cluster.fake import FakeDevices
t=time.time()
ray.init(num_cpus=4, log_to_driver=False, include_dashboard=False)
print("init", time.time()-t)
def softmax(x): return x.softmax(-1)
for k in range(2):
    t=time.time()
    f = saturn.compile(softmax, saturn.spec((8, 33)), target="cpu", backend=FakeDevices(("fake-A","fake-A","fake-B")),
                   cluster=Ray(build_workers=2), budget=4, quiet=True, cache=False)
    print("took", time.time()-t)
    print("\n".join(f.result.notes))
    print(f.result.seconds)
