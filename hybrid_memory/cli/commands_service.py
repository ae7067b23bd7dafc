"""Service commands: serve (HTTP), mcp (stdio), apikey."""

from __future__ import annotations

import argparse
import os
import sys

from ..config import Config
from ..crypto import Keyring
from ..errors import ConfigError, InvalidInputError


def _keys_path(args: argparse.Namespace) -> str:
    return args.keys or os.environ.get("HYBRID_MEMORY_API_KEYS") or os.path.join(args.path, "api-keys.json")


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..server.app import create_app
        from ..server.keys import KeyFile
    except ImportError as exc:
        raise ConfigError(f"the service needs its extra: pip install 'hybrid-memory[server]' ({exc})") from None
    keys = KeyFile(_keys_path(args))
    if not len(keys):
        raise ConfigError(f"no API keys in {keys.path}: make one with `hybrid-memory apikey add --namespace NS`")
    config = Config.load(args.config) if args.config else Config.load()
    if args.log_json:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(message)s")
    app = create_app(keys=keys, path=None if args.db_url and args.chroma_url else args.path, store=args.db_url or None,
                     chroma_url=args.chroma_url or None, config=config,
                     key=Keyring.from_file(args.key_file) if args.key_file else None, log_json=args.log_json)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.log_json else "warning")
    return 0


def cmd_apikey(args: argparse.Namespace) -> int:
    from ..server.keys import KeyFile

    keys = KeyFile(_keys_path(args))
    if args.action == "add":
        key = keys.add(args.namespace, args.role, args.label or "")
        print(key)
        print(f"(namespace {args.namespace!r}, role {args.role}; stored hashed in {keys.path}: "
              "this is the only time the key is shown)", file=sys.stderr)
    elif args.action == "list":
        for k in keys.entries():
            print(f"{k.id}  {k.role:<5}  {k.namespace}  {k.label}")
    else:
        if not args.id:
            raise InvalidInputError("apikey revoke: give the key's id (see apikey list)")
        if not keys.revoke(args.id):
            raise InvalidInputError(f"no API key with id {args.id!r}")
        print(f"revoked {args.id}")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        from ..mcp_server import main as mcp_main
    except ImportError as exc:
        raise ConfigError(f"the MCP server needs its extra: pip install 'hybrid-memory[mcp]' ({exc})") from None
    argv = ["--path", args.path, "--namespace", args.namespace, "--session", args.session, "--role", args.role]
    for flag, value in (("--config", args.config), ("--model", args.model), ("--db-url", args.db_url),
                        ("--chroma-url", args.chroma_url), ("--key-file", args.key_file)):
        if value:
            argv += [flag, str(value)]
    return mcp_main(argv)
