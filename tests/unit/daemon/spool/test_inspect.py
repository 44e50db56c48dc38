"""``pulsar-bruce spool``: list, check and empty a stopped daemon's spool directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from pulsar_bruce.cli import main
from pulsar_bruce.spool import records
from pulsar_bruce.spool.inspect import daemon_using, empty_spool, inspect_spool
from pulsar_bruce.spool.store import SpoolStore


def datagram(i: int) -> bytes:
    return records.encode(records.DATAGRAM, b"datagram-%d" % i)


def spooled(directory: Path, segments: int = 2, per_segment: int = 3) -> list[str]:
    """``segments`` segments of ``per_segment`` datagrams and a batch of 5 each."""
    store = SpoolStore(directory, max_bytes=1 << 20, segment_bytes=1)
    store.open()
    for s in range(segments):
        data = b"".join(datagram(s * 10 + i) for i in range(per_segment))
        data += records.encode_batch("persistent://public/default/t", 0, s, 5, b"E" * 40)
        store.append(data, per_segment + 5)
    store.close()
    return store.segment_names()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def run(*args: str) -> tuple[int, str, str]:
    env = {name: None for name in os.environ if name.startswith("PULSAR_BRUCE_")}
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


# -- the module ---------------------------------------------------------------------------


def test_an_intact_spool_is_counted_and_left_as_it_was(tmp_path: Path) -> None:
    names = spooled(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "old").mkdir()
    before = snapshot(tmp_path)
    report = inspect_spool(tmp_path)
    assert [s.name for s in report.segments] == names
    assert [(s.records, s.messages) for s in report.segments] == [(4, 8), (4, 8)]
    assert report.intact and report.messages == 16 and report.unknown == ["notes.txt", "old/"]
    assert report.size == sum((tmp_path / n).stat().st_size for n in names)
    assert snapshot(tmp_path) == before


def test_damage_is_named_per_segment(tmp_path: Path) -> None:
    first, second = spooled(tmp_path)
    path = tmp_path / first
    data = bytearray(path.read_bytes())
    data[len(datagram(0)) + 14] ^= 0xFF  # the second datagram's body
    path.write_bytes(bytes(data))
    tail = tmp_path / second
    # The batch record torn (and the count mark after it): 5 messages lost, per its header.
    tail.write_bytes(tail.read_bytes()[: -records.MARK_SIZE - 10])
    (tmp_path / "seg-000000000009.spool").write_bytes(b"")
    report = inspect_spool(tmp_path)
    by_name = {s.name: s for s in report.segments}
    assert (by_name[first].corrupt, by_name[first].lost_messages) == (1, 1)
    assert (by_name[second].corrupt, by_name[second].lost_messages) == (1, 5)
    assert by_name[second].messages == 3
    assert by_name["seg-000000000009.spool"].problems() == [
        "empty segment (0 bytes): what it held is lost"
    ]
    assert not report.intact and len(report.damaged) == 3


def test_the_cursor_is_read_as_the_store_reads_it(tmp_path: Path) -> None:
    first, second = spooled(tmp_path)
    one = len(datagram(0))
    size = (tmp_path / second).stat().st_size
    gone = "seg-000000000000.spool"
    (tmp_path / "cursor").write_text(f"{first} {one}\n{second} {size + 7}\n{gone} 3")
    report = inspect_spool(tmp_path)
    by_name = {s.name: s for s in report.segments}
    assert (by_name[first].offset, by_name[first].messages, by_name[first].damaged) == (
        one,
        7,
        False,
    )
    assert by_name[second].cursor_past_end == size + 7 and by_name[second].messages == 8
    assert "past the end" in by_name[second].problems()[0]
    assert report.cursor_gone == [gone] and report.own_files == ["cursor"]


def test_a_record_larger_than_a_chunk_is_read_whole(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("pulsar_bruce.spool.inspect.CHUNK", 16)
    spooled(tmp_path, segments=1)
    report = inspect_spool(tmp_path)
    assert report.intact and (report.records, report.messages) == (4, 8)


def test_empty_deletes_only_the_spools_own_files(tmp_path: Path) -> None:
    names = spooled(tmp_path)
    (tmp_path / "cursor").write_text(f"{names[0]} 5")
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "seg-dir.spool").mkdir()
    deleted = empty_spool(inspect_spool(tmp_path))
    assert sorted(deleted) == sorted([*names, "cursor"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "seg-dir.spool"]


def test_a_daemon_holding_a_file_open_is_found(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    [name] = spooled(spool, segments=1)
    proc = tmp_path / "proc"
    for pid, command, target in [
        ("10", b"/usr/bin/python3\0/usr/bin/pulsar-bruce\0--config\0x.toml\0", spool / name),
        ("11", b"/usr/bin/less\0", spool / name),  # not a pulsar-bruce
        ("12", b"python\0-m\0pulsar_bruce\0", tmp_path / "elsewhere"),
    ]:
        (proc / pid / "fd").mkdir(parents=True)
        (proc / pid / "cmdline").write_bytes(command)
        (proc / pid / "fd" / "3").symlink_to(target)
    assert daemon_using(spool, proc, own_pid=1) == 10
    assert daemon_using(spool, proc, own_pid=10) == 0
    assert daemon_using(tmp_path / "elsewhere", proc, own_pid=1) == 12


# -- the command line ---------------------------------------------------------------------


def test_list_prints_a_line_per_segment_and_a_total(tmp_path: Path) -> None:
    first, second = spooled(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "old").mkdir()
    code, out, err = run("spool", "list", str(tmp_path))
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].startswith(first) and lines[0].endswith("4 records         8 messages")
    assert lines[1].startswith(second)
    assert "notes.txt: unknown file" in lines[2] and "old/: unknown directory" in lines[3]
    size = sum((tmp_path / n).stat().st_size for n in (first, second))
    assert lines[4] == f"total: 2 segments, {size} bytes, 8 records, 16 messages"


def test_check_exit_codes_and_lines(tmp_path: Path) -> None:
    _, second = spooled(tmp_path)
    code, out, _ = run("spool", "check", str(tmp_path))
    assert (code, out) == (0, "checked 2 segments, 8 records, 16 messages intact: no damage\n")
    tail = tmp_path / second
    tail.write_bytes(tail.read_bytes()[: -records.MARK_SIZE - 10])
    (tmp_path / "seg-000000000009.spool").write_bytes(b"")
    before = snapshot(tmp_path)
    code, out, _ = run("spool", "check", str(tmp_path))
    assert code == 1 and snapshot(tmp_path) == before
    assert out.splitlines() == [
        f"{second}: 1 corrupt record (5 messages lost)",
        "seg-000000000009.spool: empty segment (0 bytes): what it held is lost",
        "checked 3 segments, 7 records, 11 messages intact: 2 damaged segments, "
        "1 corrupt record, 5 messages known lost",
    ]


def test_a_missing_or_file_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for command in ("list", "check", "empty"):
        for path, why in [(tmp_path / "nope", "no such directory"), (tmp_path / "file", "not a")]:
            code, out, err = run("spool", command, str(path))
            assert code == 2 and out == "" and err.count("\n") == 1, (command, err)
            assert err.startswith("pulsar-bruce: error: ") and why in err


def test_empty_refuses_without_yes_and_deletes_with_it(tmp_path: Path) -> None:
    names = spooled(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    code, out, err = run("spool", "empty", str(tmp_path))
    assert code == 1 and out == ""
    assert err == (
        f"pulsar-bruce: would delete 16 messages in 2 segments of {tmp_path}; "
        "pass --yes to delete them\n"
    )
    assert all((tmp_path / n).exists() for n in names)
    code, out, err = run("spool", "empty", str(tmp_path), "--yes")
    assert code == 0 and err == ""
    assert out == "deleted 16 messages in 2 segments (2 files); left alone: notes.txt\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_empty_refuses_a_directory_in_use(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    spooled(tmp_path)
    monkeypatch.setattr("pulsar_bruce.cli.daemon_using", lambda directory: 4242)
    code, out, err = run("spool", "empty", str(tmp_path), "--yes")
    assert code == 1 and out == "" and err.count("\n") == 1 and "(pid 4242)" in err
    assert len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("command", ["list", "check"])
def test_list_and_check_warn_on_a_directory_in_use(
    tmp_path: Path,
    monkeypatch,
    command: str,  # type: ignore[no-untyped-def]
) -> None:
    spooled(tmp_path)
    monkeypatch.setattr("pulsar_bruce.cli.daemon_using", lambda directory: 4242)
    code, out, err = run("spool", command, str(tmp_path))
    assert code == 0 and out
    assert err == (
        f"pulsar-bruce: warning: {tmp_path} is in use by a running pulsar-bruce (pid 4242): "
        "this is a snapshot of files it is changing; stop it for a stable view\n"
    )
    monkeypatch.setattr("pulsar_bruce.cli.daemon_using", lambda directory: 0)
    assert run("spool", command, str(tmp_path))[2] == ""
