# saturn fuzz failure: hang: no answer in 60 s [not in a fresh process]
import numpy as np
import compiler as saturn
from compiler.fuzz import Program, check
prog = Program.from_json('{"inputs": [[[64, 64, 64, 31], "f32"]], "steps": [["move", {"op": "unsqueeze"}], ["move", {"op": "expand", "n": 3}]], "special": true, "seed": 123263}')
# steps: [('move', {'op': 'unsqueeze'}), ('move', {'op': 'expand', 'n': 3})]
# inputs: [((64, 64, 64, 31), 'f32')], special values: True
print(check(prog, 'cpu', budget=1.0))
