#!/usr/bin/python3
"""Runs openai_compat.test.mjs (the official `openai` npm package, pinned in package.json and
package-lock.json) against three live quill-servers.

The package is installed with `npm ci` into <build>/tests/openai (never into the source
tree); node_modules is reused when the lockfile has not changed. Exits 77 (skipped) when
node or npm is missing; CI has both (scripts/setup.sh installs them).
"""

import filecmp
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import e2e_util  # noqa: E402
from e2e_util import QuillServer  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        print("SKIPPED: node and npm are needed (Debian packages nodejs, npm)")
        return e2e_util.SKIP_CODE
    try:
        e2e_util.require_binaries(e2e_util.SERVER, e2e_util.CLI)
        e2e_util.model_path()
    except Exception as e:  # unittest.SkipTest
        print("SKIPPED: %s" % e)
        return e2e_util.SKIP_CODE

    work = os.path.join(e2e_util.BINARY_DIR, "tests", "openai")
    os.makedirs(work, exist_ok=True)
    installed = os.path.join(work, "node_modules", ".package-lock.json")
    fresh = not os.path.exists(installed) or not os.path.exists(
        os.path.join(work, "package-lock.json")) or not filecmp.cmp(
        os.path.join(HERE, "package-lock.json"), os.path.join(work, "package-lock.json"),
        shallow=False)
    for name in ("package.json", "package-lock.json", "openai_compat.test.mjs"):
        shutil.copyfile(os.path.join(HERE, name), os.path.join(work, name))
    if fresh:
        r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=work, timeout=600)
        if r.returncode != 0:
            print("npm ci failed")
            return 1

    quill_run = os.path.join(e2e_util.BINARY_DIR, "engine", "tools", "quill-run")
    chat_template = os.path.join(e2e_util.SHARED_DIR, "chat_templates",
                                 "Qwen-Qwen2.5-7B-Instruct.jinja")
    if not os.access(quill_run, os.X_OK) or not os.path.exists(chat_template):
        print("SKIPPED: quill-run or ../shared/chat_templates is missing")
        return e2e_util.SKIP_CODE

    # The tight server's KV pool (512 KiB = 256 tokens of kjv-1m) holds one 240-token
    # request; its queue holds one more. kjv-1m has no chat template: the chat server is
    # given one.
    with QuillServer() as server, QuillServer(
            ["--kv-cache-bytes", "512KiB", "--max-queue", "1"]) as tight, QuillServer(
            ["--chat-template", chat_template, "--precision", "exact"]) as chat:
        env = dict(os.environ)
        env.update({
            "QUILL_HTTP_URL": server.http_url,
            "QUILL_METRICS_URL": server.metrics_url,
            "QUILL_TIGHT_HTTP_URL": tight.http_url,
            "QUILL_TIGHT_METRICS_URL": tight.metrics_url,
            "QUILL_CLI": e2e_util.CLI,
            "QUILL_GRPC_ADDR": server.addr,
            "QUILL_CHAT_HTTP_URL": chat.http_url,
            "QUILL_CHAT_GRPC_ADDR": chat.addr,
            "QUILL_RUN": quill_run,
            "QUILL_MODEL": server.model,
            "QUILL_CHAT_TEMPLATE": chat_template,
        })
        r = subprocess.run([node, "--test", "openai_compat.test.mjs"], cwd=work, env=env,
                           timeout=600)
        return 0 if r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
