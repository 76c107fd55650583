# saturn fuzz failure: error: SearchError: no candidate passed verification within the budget (1 s; pass a larger budget=):
#     trial 0 (original program, default): rejected: mismatch (input set 0): 1 of 896 elements outside their error bound (1 NaN where the reference has none); worst at (2, 0, 63, 1): got nan, float64 reference 0 +- 1.32e-08
#     trial 1 (original program, cublas): rejected: mismatch (input set 0): 1 of 896 elements outside their error bound (1 NaN where the reference has none); worst at (2, 0, 63, 1): got nan, float64 reference 0 +- 1.32e-08
#     trial 2 (original program, prior): skipped: budget spent before it was verified
#     trial 3 (original program, prior#2): skipped: budget spent before it was verified
#     trial 4 (original program, tc128x128x32w2x4s4): skipped: budget spent before it was verified
#     trial 5 (original program, tc128x128x64w2x2s3): skipped: budget spent before it was verified
#     trial 6 (original program, tc128x128x64w2x4s3): skipped: budget spent before it was verified
#     trial 7 (original program, tc128x256x32w2x4s3): skipped: budget spent before it was verified
#     trial 8 (one-pass-dag: 5 reductions (1 two-level, 1 contractions), 0 materialized, 0 exp2, default): skipped: budget spent while it was being built or verified
#     trial 9 (compute-dag~1: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, default): skipped: budget spent while it was being built or verified
#     trial 10 (one-pass~3: 5 reductions (1 two-level, 3 contractions), 0 materialized, 0 exp2, default): skipped: budget spent before it was verified
#     trial 11 (one-pass-light~4: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, default): skipped: budget spent before it was verified
#     trial 12 (tiled~5: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, default): skipped: budget spent before it was verified
#     trial 13 (materialize~6: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, default): skipped: budget spent before it was verified
#     trial 14 (compute~10: 5 reductions (1 two-level, 3 contractions), 0 materialized, 0 exp2, default): skipped: budget spent before it was verified
#     trial 15 (one-pass-dag: 5 reductions (1 two-level, 1 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 16 (compute-dag~1: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 17 (one-pass~3: 5 reductions (1 two-level, 3 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 18 (one-pass-light~4: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 19 (tiled~5: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 20 (materialize~6: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 21 (compute~10: 5 reductions (1 two-level, 3 contractions), 0 materialized, 0 exp2, cublas): skipped: budget spent before it was verified
#     trial 22 (one-pass-dag: 5 reductions (1 two-level, 1 contractions), 0 materialized, 0 exp2, prior): skipped: budget spent before it was verified
#     trial 23 (compute-dag~1: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, prior): skipped: budget spent before it was verified
#     trial 24 (one-pass~3: 5 reductions (1 two-level, 3 contractions), 0 materialized, 0 exp2, prior): skipped: budget spent before it was verified
#     trial 25 (one-pass-light~4: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, prior): skipped: budget spent before it was verified
#     trial 26 (tiled~5: 5 reductions (1 two-level, 2 contractions), 0 materialized, 0 exp2, prior): skipped: budget spent before it was verified
#     trial 27 (materialize~6: 5 reductions (1 two-level, 4 contractions), 0 materialized, 0 exp2, prior):
import numpy as np
import compiler as saturn
from compiler.fuzz import Program, check
prog = Program.from_json('{"inputs": [[[7, 31, 64, 2], "bool"]], "steps": [["reduce", {"op": "var", "axis": 1, "keepdim": true}], ["norm", {"op": "layer_norm", "axis": -1}], ["norm", {"op": "rms_norm", "axis": -1}]], "special": false, "seed": 347811}')
# steps: [('reduce', {'op': 'var', 'axis': 1, 'keepdim': True}), ('norm', {'op': 'layer_norm', 'axis': -1}), ('norm', {'op': 'rms_norm', 'axis': -1})]
# inputs: [((7, 31, 64, 2), 'bool')], special values: False
print(check(prog, 'cuda', budget=1.0))
