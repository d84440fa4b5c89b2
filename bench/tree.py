"""The log's Merkle tree on the big demo ledger: how long the integrator takes to bring a tree up
to a whole log that never had one, then what an auditor's proof costs once it holds the log:
`idemgate prove` (open the ledger, find the leaf, read the path, read the kept checkpoint or sign
one) and `idemgate verify --proof` (no ledger), each a whole process, medians of 5."""

import os
import statistics
import subprocess
import time


def timed(args):
    t0 = time.perf_counter()
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - t0


def measure(idemgate, ledger, work, events):
    key = os.path.join(work, "tree-key")
    subprocess.run([idemgate, "keygen", "--out", key, "--name", "bench.example/idemgate"], check=True,
                   stdout=subprocess.DEVNULL)
    seq = str(max(1, events // 2))

    def prove(n):
        out = os.path.join(work, f"proof-{n}.tlog-proof")
        return timed([idemgate, "prove", "--ledger", ledger, "--event", seq, "--signing-key", f"{key}.key",
                      "-o", out]), out

    integrate_s, first = prove("first")
    proves, proofs = zip(*(prove(i) for i in range(5)))
    verifies = [timed([idemgate, "verify", "--proof", p, "--public-key", f"{key}.pub"]) for p in proofs]
    return {"integrate_s": integrate_s, "prove_ms": statistics.median(proves) * 1000,
            "verify_proof_ms": statistics.median(verifies) * 1000}
