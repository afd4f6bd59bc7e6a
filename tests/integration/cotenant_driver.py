"""What a user's ckit does to a cache folder, run as that user by test_cache_cotenants_files.py: publish an image
into its tree (as a conversion does), get one (as the importer does: hold, stamp, look up, else convert), evict,
list. Standard library and ckit only (run by the system Python: other users cannot reach the test's venv).

    python3 cotenant_driver.py put|get|evict|ls CACHE [NAME [SPARSE_BYTES|MAX_BYTES]] [--private]

Prints one JSON document on stdout; a ckit error exits with its status and message on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from buildkit.errors import CkitError
from buildkit.storage.cache import CacheDir
from buildkit.storage.holds import is_key
from buildkit.storage.store import make_key

HOLDER = "7.0@node1"


def cache_of(folder: str) -> CacheDir:
    return CacheDir(Path(folder), fallback=Path(os.environ["CKIT_CACHE_DIR"]))


def put(cache: CacheDir, name: str, sparse: int = 0, private: bool = False) -> dict[str, str]:
    """Publish an image ``name`` (4 KiB of data, or a sparse file of ``sparse`` bytes) and its record."""
    store = cache.writer()
    key = make_key(source_digest=f"sha256:{name}", target="sqsh")
    with store.lock(key):
        temp = store.temp_path(key, "sqsh")
        with open(temp, "wb") as out:
            out.write(b"hsqs" + name.encode().ljust(4092, b"\0"))
            if sparse:
                out.truncate(sparse)
        store.publish(key, "sqsh", temp, {"target": "sqsh", "source": name, "created": 0}, lambda p: None,
                      private=private)
    cache.write_ref("images", name, {"key": key, "digest": name, "target": "sqsh"}, private=private)
    if private:
        cache.grant("registry.example", name, str(os.geteuid()))
    return {"key": key, "path": str(store.path(key, "sqsh")), "converted": "yes"}


def get(cache: CacheDir, name: str) -> dict[str, str]:
    for store in cache.readers():
        record = cache.read_ref(store, "images", name)
        if record is None or not is_key(record.get("key")):
            continue
        cache.hold(record["key"], HOLDER)
        cache.touch(record["key"])
        entry = store.get(record["key"], "sqsh")
        if entry is not None:
            return {"key": entry.key, "path": str(entry.path), "converted": "no"}
    return put(cache, name)


def main(argv: list[str]) -> int:
    private = "--private" in argv
    verb, folder, *rest = [a for a in argv if a != "--private"]
    try:
        cache = cache_of(folder)
        if verb == "put":
            out: object = put(cache, rest[0], int(rest[1]) if len(rest) > 1 else 0, private)
        elif verb == "get":
            out = get(cache, rest[0])
        elif verb == "evict":
            out = [e.key for e in cache.evict(int(rest[0]))]
        else:
            from buildkit.api._cache import cache_ls

            listing = cache_ls(folder=folder)
            out = {"entries": [e.as_json() for e in listing.entries], "notes": listing.notes}
    except CkitError as err:
        sys.stderr.write(f"error: {err}\n")
        return err.exit_code
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
