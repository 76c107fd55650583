# saturn fuzz failure: mismatch: 3 of 16 elements differ; at (4,): got np.float64(0.006672349546664797), reference np.float64(0.006672349548428223) +- 2.39e-16
import numpy as np
import compiler as saturn
from compiler.fuzz import Program, check
prog = Program.from_json('{"inputs": [[[4, 4], "f32"], [[], "f64"]], "steps": [["cast", {"to": "f64"}], ["unary", {"op": "square"}], ["norm", {"op": "softmax", "axis": -1}], ["move", {"op": "flatten"}], ["unary", {"op": "tanh"}]], "special": false, "seed": 119334}')
# steps: [('cast', {'to': 'f64'}), ('unary', {'op': 'square'}), ('norm', {'op': 'softmax', 'axis': -1}), ('move', {'op': 'flatten'}), ('unary', {'op': 'tanh'})]
# inputs: [((4, 4), 'f32'), ((), 'f64')], special values: False
print(check(prog, 'cpu', budget=1.0))
