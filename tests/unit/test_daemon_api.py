"""The engine's local socket spoken to without the docker SDK: ping, inspect, and what a misbehaving engine
gets (a clear error, never a traceback or an unbounded read)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from buildkit.daemon import MAX_REPLY, EngineAPIError, connect
from buildkit.engine.docker import DockerEngine
from buildkit.errors import BuildError, ConfigError, ConvertError
from buildkit.image.sources.docker_daemon import DaemonSource

Reply = Callable[[str], bytes]  # request path -> the raw HTTP answer
PING = (b"HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nLibpod-Api-Version: 4.3.1\r\nServer: Libpod/4.3.1 (linux)\r\n"
        b"Content-Length: 2\r\n\r\nOK")


def answer(status: str, body: bytes) -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Callable[[Reply], tuple[str, list[str]]]]:
    """``engine(reply)``: a fake engine on a unix socket; gives its DOCKER_HOST and the paths it was asked for."""
    servers: list[socketserver.UnixStreamServer] = []

    def start(reply: Reply) -> tuple[str, list[str]]:
        asked: list[str] = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                path = self.rfile.readline().decode().split()[1]
                length = 0
                while (header := self.rfile.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    length = int(value) if name.lower() == "content-length" else length
                self.rfile.read(length)  # a build's context
                asked.append(path)
                self.wfile.write(PING if path == "/_ping" else reply(path))

        where = tmp_path / f"engine-{len(servers)}.sock"
        server = socketserver.UnixStreamServer(str(where), Handler)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return f"unix://{where}", asked

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


IMAGE = b'{"Id": "sha256:' + b"a" * 64 + b'", "Config": {"Labels": {"io.ckit.build.key": "k"}}, "Size": 5}'


def test_ping_and_inspect_without_the_sdk(engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    host, asked = engine(lambda path: answer("200 OK", IMAGE) if "/img:1/" in path else answer("404 Not Found",
                                                                                             b'{"message": "no"}'))
    daemon = connect({"DOCKER_HOST": host})
    assert (daemon.server, daemon.api_version) == ("podman 4.3.1", "1.41")
    assert daemon.inspect_image("localhost/img:1")["Size"] == 5  # type: ignore[index]
    assert daemon.inspect_image("localhost/other:1") is None
    assert asked == ["/_ping", "/v1.41/images/localhost/img:1/json", "/v1.41/images/localhost/other:1/json"]


@pytest.mark.parametrize(("reply", "message"), [
    (answer("500 Internal Server Error", b'{"message": "storage is locked"}'), "HTTP 500: storage is locked"),
    (answer("200 OK", b"<html>"), "the engine's answer is not JSON"),
    (answer("200 OK", b"[1, 2]"), "is not an image description"),
    (b"garbage\r\n\r\n", "BadStatusLine"),
])
def test_a_misbehaving_engine_is_a_clear_error(engine, reply: bytes, message: str,  # type: ignore[no-untyped-def]
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    host, _ = engine(lambda path: reply)
    with pytest.raises(EngineAPIError, match=message):
        connect({"DOCKER_HOST": host}).inspect_image("localhost/img:1")
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(BuildError, match="cannot inspect image localhost/img:1: "):
        DockerEngine({"DOCKER_HOST": host}).image("localhost/img:1")
    with pytest.raises(ConvertError, match="docker-daemon:localhost/img:1: cannot reach the engine: "):
        DaemonSource("docker-daemon:localhost/img:1", "localhost/img:1").identify()


def test_an_endless_answer_is_cut_off(engine) -> None:  # type: ignore[no-untyped-def]
    host, _ = engine(lambda path: answer("200 OK", b" " * (MAX_REPLY + 10)))
    with pytest.raises(EngineAPIError, match=f"exceeds {MAX_REPLY} bytes"):
        connect({"DOCKER_HOST": host}).inspect_image("localhost/img:1")


def test_no_engine_is_bad_input_naming_the_socket(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot reach a Docker API engine \(unix://.*nothing.sock: no such file"):
        connect({"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"})


def test_a_missing_image_is_bad_input(engine, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    host, _ = engine(lambda path: answer("404 Not Found", b'{"message": "no such image"}'))
    monkeypatch.setenv("DOCKER_HOST", host)
    with pytest.raises(ConfigError, match="docker-daemon:localhost/img:1: no such image in the engine"):
        DaemonSource("docker-daemon:localhost/img:1", "localhost/img:1").identify()
    assert DockerEngine({"DOCKER_HOST": host}).image("localhost/img:1") is None


def test_the_build_cache_check_reads_the_labels_and_hands_on_its_answer(engine) -> None:  # type: ignore[no-untyped-def]
    from buildkit.engine.base import BuildRequest

    host, asked = engine(lambda path: answer("200 OK", IMAGE))
    docker_engine = DockerEngine({"DOCKER_HOST": host})
    hit = docker_engine.cached(BuildRequest(context=[], key="k", tag="localhost/img:1"))
    assert hit is not None and hit.image_id == "sha256:" + "a" * 64 and hit.size == 5
    assert docker_engine.cached(BuildRequest(context=[], key="other", tag="localhost/img:1")) is None
    source = DaemonSource("docker-daemon:localhost/img:1", "localhost/img:1", daemon=docker_engine.daemon,
                          inspected=hit.inspected)
    count = len(asked)
    assert source.identify().digest == "sha256:" + "a" * 64
    assert len(asked) == count  # identified from the cache check's answer: the engine was not asked again


def chunked(*pieces: bytes) -> bytes:
    """A 200 answer in chunked transfer encoding, cut where the pieces end (not where the items do)."""
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + body


def builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str) -> DockerEngine:
    """The docker engine on ``host``, for a user without a docker config file (so it builds on the socket)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    docker_engine = DockerEngine({"DOCKER_HOST": host})

    def no_sdk(*args: object) -> None:
        raise AssertionError("built through the docker SDK")

    monkeypatch.setattr(docker_engine, "_sdk_build", no_sdk)
    return docker_engine


def test_a_build_on_the_socket_streams_its_lines(engine, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from buildkit.engine.base import BuildRequest
    from buildkit.render.context import ContextFile

    stream = chunked(b'{"stream": "STEP 1/2: FROM x\\n"}\n{"stream": "STEP 2/', b'2: LABEL a=b\\n"}\n\n',
                     b'{"aux": {"ID": "sha256:' + b"b" * 64 + b'"}}\n')
    host, asked = engine(lambda path: stream if path.startswith("/v1.41/build?") else answer("200 OK", IMAGE))
    lines: list[str] = []
    context = [ContextFile("Dockerfile", b"FROM x\nLABEL a=b\n", 0o644)]
    built = builds(tmp_path, monkeypatch, host).build(BuildRequest(context, "k", "localhost/img:1", no_cache=True),
                                                      lambda event: lines.append(event.line))
    assert lines == ["STEP 1/2: FROM x", "STEP 2/2: LABEL a=b"] and built.image_id == "sha256:" + "b" * 64
    assert asked[1] == "/v1.41/build?t=localhost%2Fimg%3A1&rm=1&forcerm=1&nocache=1&pull=0"  # labels in the LABEL


@pytest.mark.parametrize(("reply", "message"), [
    (answer("500 Internal Server Error", b""), "build: HTTP 500: the engine gave no reason"),
    (chunked(b"<html>\n"), "build: the engine's answer is not a stream of JSON objects: b'<html>"),
    (chunked(b"[1]\n"), "build: the engine's answer is not a stream of JSON objects: b'[1]"),
    (chunked(b"{" + b" " * (MAX_REPLY + 1)), f"build: an item of the engine's answer exceeds {MAX_REPLY} bytes"),
])
def test_a_build_the_engine_refuses_names_the_image(engine, tmp_path: Path, reply: bytes,  # type: ignore[no-untyped-def]
                                                     message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from buildkit.engine.base import BuildRequest

    host, _ = engine(lambda path: reply)
    with pytest.raises(BuildError) as err:
        builds(tmp_path, monkeypatch, host).build(BuildRequest([], "k", "localhost/img:1"), lambda event: None)
    assert err.value.message.startswith(f"the engine refused the build of localhost/img:1: {message}")


@pytest.mark.parametrize("where", ["HOME/.docker/config.json", "HOME/.dockercfg", "DOCKER_CONFIG/config.json"])
def test_a_docker_config_file_means_the_sdk_sends_its_credentials(where: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from buildkit.engine.docker import docker_config

    env = {"HOME": str(tmp_path / "home"), "DOCKER_CONFIG": str(tmp_path / "conf")}
    assert docker_config(env) is None
    path = Path(where.replace("HOME", env["HOME"]).replace("DOCKER_CONFIG", env["DOCKER_CONFIG"]))
    path.parent.mkdir(parents=True)
    path.write_text('{"auths": {}}')
    assert docker_config(env) == path
