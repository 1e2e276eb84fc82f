#!/usr/bin/python3
"""Runs a build's CTest tests with one process per batch of GoogleTest cases.

gtest_discover_tests registers every case as its own test, so `ctest` starts one process
per case. Under ASan that start (loading oneDNN, gRPC and the shadow memory) costs more
than most cases: 1,337 of the sanitizer stage's 1,635 tests ran for under 0.5 s each. This
runner asks CTest which tests it would run (the same -L/-E/-R arguments), runs the
discovered GoogleTest cases of each binary together through one --gtest_filter (in batches
of at most BATCH cases, longest binaries first), and hands every other test (fixtures,
expected output, expected failure, fuzz corpora) back to ctest by name.

  scripts/ctest_batched.py BUILD_DIR [-j N] [--timeout S] [--one-thread-except REGEX]
                           [ctest selection args...]

--one-thread-except runs every batch whose binary's name does not match REGEX with
OMP_NUM_THREADS=1 (see scripts/sanitize.sh for why).

Exit status 0 when every batch and every ctest test passed. A failed batch prints its whole
output; each batch aborts on its first sanitizer finding, as a ctest test would.
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time

BATCH = 200  # cases per process: keeps --gtest_filter far below the kernel's 128 KiB limit
# Properties gtest_discover_tests sets on every case; a test with any other property is
# left to ctest, which knows what it means.
PLAIN_PROPERTIES = {"ENVIRONMENT", "LABELS", "SKIP_REGULAR_EXPRESSION", "TIMEOUT",
                    "WORKING_DIRECTORY"}


def selected_tests(build_dir, ctest_args):
    listing = subprocess.run(
        ["ctest", "--test-dir", build_dir, "-N", "--show-only=json-v1", *ctest_args],
        check=True, capture_output=True, text=True).stdout
    return json.loads(listing)["tests"]


def gtest_filter(test):
    """The test's --gtest_filter value, if it is a plain discovered GoogleTest case."""
    properties = {p["name"] for p in test.get("properties", [])}
    if not properties <= PLAIN_PROPERTIES:
        return None
    for arg in test.get("command", [])[1:]:
        if arg.startswith("--gtest_filter="):
            return arg[len("--gtest_filter="):]
    return None


def plan(tests):
    """Splits the tests into GoogleTest batches and the names left to ctest."""
    groups, others = {}, []
    for test in tests:
        case = gtest_filter(test)
        if case is None:
            others.append(test["name"])
            continue
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        key = (test["command"][0], props.get("WORKING_DIRECTORY", ""),
               tuple(props.get("ENVIRONMENT", [])))
        groups.setdefault(key, []).append(case)
    batches = []
    for (binary, cwd, env), cases in groups.items():
        for start in range(0, len(cases), BATCH):
            batches.append((binary, cwd, env, cases[start:start + BATCH]))
    batches.sort(key=lambda b: -len(b[3]))
    return batches, others


def run_batch(batch, timeout, one_thread):
    binary, cwd, env, cases = batch
    environment = dict(os.environ)
    if one_thread:
        environment["OMP_NUM_THREADS"] = "1"
    environment.update(item.split("=", 1) for item in env)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            status = subprocess.run(
                [binary, "--gtest_filter=" + ":".join(cases)], cwd=cwd or None,
                env=environment, stdout=log, stderr=subprocess.STDOUT,
                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            status = "timeout"
        except OSError as error:
            status = str(error)
        log.seek(0)
        output = log.read()
    ran = re.search(r"^\[=+\] (\d+) tests? from", output, re.M)
    ran = int(ran.group(1)) if ran else 0
    # A filter entry that matches nothing would silently drop a case.
    ok = status == 0 and ran == len(cases)
    return ok, status, ran, time.monotonic() - start, output


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900, help="seconds per batch")
    parser.add_argument("--one-thread-except", metavar="REGEX",
                        help="run batches of other binaries with OMP_NUM_THREADS=1")
    args, ctest_args = parser.parse_known_args()

    batches, others = plan(selected_tests(args.build_dir, ctest_args))
    cases = sum(len(b[3]) for b in batches)
    print(f"{cases} GoogleTest cases in {len(batches)} processes, {len(others)} tests via ctest",
          flush=True)
    start = time.monotonic()
    failed = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        keep_threads = re.compile(args.one_thread_except or ".*")
        futures = {pool.submit(run_batch, b, args.timeout,
                               not keep_threads.search(os.path.basename(b[0]))): b
                   for b in batches}
        for future in concurrent.futures.as_completed(futures):
            binary, _, _, batch_cases = futures[future]
            ok, status, ran, seconds, output = future.result()
            name = os.path.basename(binary)
            print(f"{'Passed' if ok else 'FAILED'} {name}: {ran} of {len(batch_cases)} cases, "
                  f"{seconds:.1f} s", flush=True)
            if not ok:
                print(f"--- {name} (exit status {status}) output:\n{output}", flush=True)
                failed.append(name)
    print(f"GoogleTest batches: {len(batches) - len(failed)} of {len(batches)} passed in "
          f"{time.monotonic() - start:.0f} s", flush=True)

    if others:
        pattern = "^(" + "|".join(re.escape(n) for n in others) + ")$"
        result = subprocess.run(["ctest", "--test-dir", args.build_dir, "--output-on-failure",
                                 "--timeout", str(args.timeout), "-j", str(args.jobs),
                                 "-R", pattern])
        if result.returncode != 0:
            failed.append("ctest")
    if failed:
        print("FAILED: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
