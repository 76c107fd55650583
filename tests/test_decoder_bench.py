"""benchmarks/decoder_bench.py's per-launch table (--profile-all): every launch of every profiled
schedule on a line, repeated kernels told apart, launches one schedule lacks left blank."""
from benchmarks.decoder_bench import profile_table


def test_profile_table_lines_up_launches_by_name():
    row = {"saturn": [
        # (milliseconds, as decoder_bench records them)
        {"schedule": "prior", "profile": [["k0_row", 0.01], ["k1_gemm", 0.02], ["k1_gemm", 0.03]]},
        {"schedule": "cublas", "profile": [["k0_row", 0.02], ["k1_gemm", 0.04], ["k1_gemm_epilogue", 0.01]]},
        {"schedule": "rejected", "rejected": "no"},
    ]}
    lines = profile_table(row).splitlines()
    assert lines[0] == "| launch | prior | cublas |"
    assert "| k1_gemm | 20.0 | 40.0 |" in lines
    assert "| k1_gemm#2 | 30.0 |  |" in lines
    assert "| k1_gemm_epilogue |  | 10.0 |" in lines
    assert lines[-1] == "| sum | 60.0 | 70.0 |"
    assert profile_table({"saturn": [{"schedule": "x", "ms": 1.0}]}) == ""
