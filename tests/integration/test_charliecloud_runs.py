"""Charliecloud's ch-run (Debian 12, 0.31) on .sqsh files ``ckit convert`` wrote: as root and as an unprivileged user.

A minimal image (busybox and nothing else: no /proc, /sys, /dev, /tmp, /etc) with an ENV that ch-run would
mangle (single quotes around a value, ``$``), a WorkingDir and an ENTRYPOINT. Before its .sqsh carried the
/ch files and the mount points, ch-run refused it ("can't bind: destination not found: …/dev") and, once given
those, lost the ENV ("can't open: /ch/environment") and started in /.

Then jobs ``ckit launch --runtime charliecloud`` wrote, on the real Slurm: the image's ENV, an ``--env`` over it,
the working directory (the submit folder, or ``--workdir``), a bind mount written through, the arguments as
given (not the ENTRYPOINT's), with and without the submit environment's USER and HOME.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildkit.cli import main
from buildkit.launch.slurmjobs import wait_for
from buildkit.launch.words import literal
from buildkit.process import run
from tests.integration import hostile_images as H
from tests.integration.folders import readable_folder

ENV = ("PATH=/bin", "GREETING=hello 'world' $HOME", "QUOTED='kept'", "PLAIN=image")
WORKDIR = "/opt/app"
REPORT = 'echo "pwd=$(pwd) G=[$GREETING] Q=[$QUOTED] P=[$PLAIN] U=[$USER] id=$(id -u)"; for a; do echo "arg[$a]"; done'


def _minimal_layout(path: Path) -> str:
    """busybox with a few applet links, nothing else; the config as ``docker build`` would write it."""
    busybox = H.entry("bin/busybox", "file", Path("/bin/busybox").read_bytes())
    busybox[0].mode = 0o755
    links = [H.entry(f"bin/{a}", "symlink", target="busybox")
             for a in ("sh", "echo", "id", "pwd", "cat", "touch", "sleep", "rm")]
    layer = H.tar_bytes([H.entry("bin", "dir"), busybox, *links])
    ref = H.oci_layout(path, [layer])
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers",
                         "diff_ids": [H.sha(layer)]}, "config": {"Env": list(ENV), "WorkingDir": WORKDIR,
                         "Entrypoint": ["/bin/echo", "ENTRYPOINT-RAN"], "Cmd": ["default"]}}).encode()
    manifest, manifest_path = H.layout_manifest(path)
    digest = H.sha(config)
    (path / "blobs" / "sha256" / digest.split(":")[1]).write_bytes(config)
    manifest["config"] = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest,
                          "size": len(config)}
    data = json.dumps(manifest).encode()
    (path / "blobs" / "sha256" / H.sha(data).split(":")[1]).write_bytes(data)
    index = json.loads((path / "index.json").read_text())
    index["manifests"][0].update(digest=H.sha(data), size=len(data))
    (path / "index.json").write_text(json.dumps(index))
    manifest_path.unlink()
    return ref


@pytest.fixture(scope="module")
def minimal(charliecloud, tmp_path_factory) -> Iterator[Path]:  # type: ignore[no-untyped-def]
    with readable_folder("ckit-sqsh-") as folder:
        sqsh = folder / "minimal.sqsh"
        ref = _minimal_layout(tmp_path_factory.mktemp("layout") / "oci")
        assert main(["-q", "convert", ref, "--to", "sqsh", "-o", str(sqsh)]) == 0
        yield sqsh


def ch_run(image: Path, *args: str, user: str | None = None) -> str:
    as_user = ["runuser", "-u", user, "--"] if user else []
    return run([*as_user, "env", f"USER={user or 'root'}", "ch-run", *args, str(image), "--", "/bin/sh", "-c",
                REPORT, "sh", "$(touch pwned)", "it's"], timeout=60, step="ch-run").stdout


@pytest.mark.parametrize("who", ["root", "user"])
def test_ch_run_runs_a_minimal_image_with_its_env_and_workdir(minimal, charliecloud, who):
    user = charliecloud.user.pw_name if who == "user" else None
    uid = charliecloud.user.pw_uid if user else 0
    cwd = json.loads(run(["unsquashfs", "-cat", str(minimal), "ch/metadata.json"]).stdout)["cwd"]
    assert cwd == WORKDIR
    out = ch_run(minimal, "--env-no-expand", "--set-env", "--cd", cwd, user=user)
    assert out == (f"pwd={WORKDIR} G=[hello 'world' $HOME] Q=['kept'] P=[image] U=[{user or 'root'}] id={uid}\n"
                   "arg[$(touch pwned)]\narg[it's]\n")


def test_the_sqsh_carries_what_ch_run_needs_next_to_enroots_files(minimal):
    listing = run(["unsquashfs", "-lls", str(minimal)]).stdout
    for path in ("ch/environment", "ch/metadata.json", "etc/rc", "etc/environment", "etc/passwd", "etc/group",
                 "etc/hosts", "etc/resolv.conf", "dev", "proc", "sys", "tmp", "home", "mnt/0", "mnt/9", "opt/app"):
        assert f"squashfs-root/{path}\n" in listing, path
    assert run(["unsquashfs", "-cat", str(minimal), "ch/environment"]).stdout == \
        "GREETING=hello 'world' $HOME\nPATH=/bin\nPLAIN=image\nQUOTED=''kept''\n"


def _job(folder: Path, image: Path, data: Path, *extra: str, user: str | None = None,
         home: str | None = None) -> tuple[str, str]:
    """Write a job with ckit launch in ``folder`` and submit it (as ``user``: sbatch --export=NONE by that user,
    else as root with neither USER nor HOME in the submit environment, or with ``home`` as HOME)."""
    argv = ["launch", "--site", "local", "-p", "multi", "-N", "2", "-J", "cc", "--runtime", "charliecloud",
            "--image", str(image), "--env", literal("PLAIN=from --env $(id) \"q\""), "--mount", f"{data}:/mnt/0",
            *extra, "--no-submit", "--", "/bin/sh", "-c", literal(f"{REPORT}; cat /mnt/0/in; touch /mnt/0/out-$(id -u)"),
            "sh", literal("$(touch pwned)"), "it's", "a  b"]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        assert main(argv) == 0
        if user:
            submit = ["runuser", "-u", user, "--", "sbatch", "--export=NONE", "--parsable", "cc.sbatch"]
        else:
            submit = ["env", "-u", "USER", *([f"HOME={home}"] if home else ["-u", "HOME"]), "sbatch", "--parsable",
                      "cc.sbatch"]
        job = run(submit, timeout=60).stdout.strip().split(";")[0]
    assert wait_for(job, poll=0.5) == 0, (folder / f"cc-{job}.out").read_text()
    return job, (folder / f"cc-{job}.out").read_text()


@pytest.mark.parametrize("who", ["root", "user", "root-home-not-here"])
def test_a_job_sees_env_workdir_binds_and_arguments(slurm, minimal, charliecloud, tmp_path, who):
    entry = charliecloud.user
    folder = Path(tempfile.mkdtemp(prefix="ckit-job-", dir="/tmp")) if who == "user" else tmp_path
    data = folder / "data"
    data.mkdir()
    (data / "in").write_text("bound\n")
    if who == "user":
        for path in (folder, data):
            shutil.chown(path, entry.pw_uid, entry.pw_gid)
    user, uid = (entry.pw_name, entry.pw_uid) if who == "user" else ("root", 0)
    try:
        # root: the submit folder; the user: --workdir, the image's WorkingDir
        # a submit shell's HOME that is not there on the nodes (not mounted): ch-run --home would stop at once
        job, text = _job(folder, minimal, data, *(["--workdir", WORKDIR] if who == "user" else []),
                         user=user if who == "user" else None,
                         home="/home/not-mounted" if who == "root-home-not-here" else None)
        if who == "root-home-not-here":
            said = "ckit: HOME=/home/not-mounted is not a folder on "
            assert [line for line in text.splitlines() if said in line], text
            text = "".join(line for line in text.splitlines(keepends=True) if said not in line)
        where = WORKDIR if who == "user" else str(folder)
        line = (f"pwd={where} G=[hello 'world' $HOME] Q=['kept'] P=[from --env $(id) \"q\"] U=[{user}] id={uid}\n"
                "arg[$(touch pwned)]\narg[it's]\narg[a  b]\nbound\n")
        assert sorted(text.splitlines()) == sorted((line * 2).splitlines()), text  # n1 and n2
        assert (data / f"out-{uid}").stat().st_uid == uid
        assert "ENTRYPOINT-RAN" not in text and not list(folder.rglob("pwned"))
    finally:
        if who == "user":
            shutil.rmtree(folder, ignore_errors=True)


def test_the_tasks_sharing_a_container_outlive_the_first_ones_command(slurm, minimal, charliecloud, tmp_path):
    """Two tasks on a node share one container (ch-run --join), whose image lives as long as the first task's
    command (ch-run's SquashFUSE server is its parent). One task's command ends at once, the other's reads the image
    a second later; which of the two made the container is chance, so four jobs swap the roles (on two nodes,
    whose tasks count each other only: the test nodes share one /tmp, as some clusters' do). Before ckit held
    every command until the node's last one ended, the late task died ("join: no PID …", or SIGBUS reading the
    image) whenever the quick one had made the container."""
    late = ('if [ "$SLURM_LOCALID" = "$CKIT_QUICK" ]; then echo quick; else sleep 1; '
            'cat /ch/environment >/dev/null && echo late-read-the-image; fi')
    jobs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        for quick in (0, 1, 0, 1):
            assert main(["launch", "--site", "local", "-p", "multi", "-N", "2", "--tasks-per-node", "2", "-J",
                         f"hold{quick}", "-t", "2", "--runtime", "charliecloud", "--image", str(minimal), "--env",
                         f"CKIT_QUICK={quick}", "--script", f"hold{len(jobs)}.sbatch", "--no-submit", "--",
                         "sh", "-c", literal(late)]) == 0
            job = run(["sbatch", "--parsable", f"hold{len(jobs)}.sbatch"], timeout=60).stdout.strip()
            jobs.append((job, tmp_path / f"hold{quick}-{job}.out"))
    for job, log in jobs:
        rc = wait_for(job, poll=0.5)
        text = log.read_text()
        assert rc == 0 and sorted(text.split()) == ["late-read-the-image"] * 2 + ["quick"] * 2, text
    assert not [p for job, _ in jobs for p in Path("/tmp").glob(f".ckit-join-{job}.*")]  # gone with the step
