"""The entry point: flags, and serve() running until told to stop."""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from internal.webhook import add_flags, serve


def test_flags_defaults_and_overrides() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args([])
    assert (args.port, args.self_signed_certs, args.patch_ca_bundle) == (9443, True, True)
    assert args.device_exposure == "cuda-visible-devices"
    args = parser.parse_args(["--no-self-signed-certs", "--cert-dir=/certs", "--host=a.b",
                              "--host=10.0.0.9", "--device-exposure=device-plugin"])
    assert (args.self_signed_certs, args.cert_dir, args.hosts) == (
        False, "/certs", ["a.b", "10.0.0.9"])


def test_serve_runs_until_stopped(tmp_path: Path) -> None:
    stop = threading.Event()
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(serve(
        bind_address="127.0.0.1", port=0, cert_dir=str(tmp_path), patch_ca_bundle=False,
        stop=stop)))
    t.start()
    stop.set()
    t.join(10)
    assert result == [0]
    assert (tmp_path / "tls.crt").is_file() and (tmp_path / "ca.crt").is_file()
