# saturn fuzz failure: mismatch: 5 of 784 elements differ; at (0, 3, 0): got np.float64(0.0), reference np.float64(nan) +- 0.00338
import numpy as np
import compiler as saturn
from compiler.fuzz import Program, check
prog = Program.from_json('{"inputs": [[[7, 16, 7], "i32"]], "steps": [["norm", {"op": "log_softmax", "axis": -1}], ["norm", {"op": "layer_norm", "axis": -1}], ["unary", {"op": "sqrt"}]], "special": false, "seed": 119874}')
# steps: [('norm', {'op': 'log_softmax', 'axis': -1}), ('norm', {'op': 'layer_norm', 'axis': -1}), ('unary', {'op': 'sqrt'})]
# inputs: [((7, 16, 7), 'i32')], special values: False
print(check(prog, 'cpu', budget=1.0))
