"""A job's log within its cap: the capped log's files and view by hand-computed byte counts."""

from __future__ import annotations

from pathlib import Path

from quasched.service import joblog
from quasched.service.joblog import Caps, Writer

LETTERS = b"abcdefghijklmnopqrstu"  # 21 bytes


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_head_then_the_last_two_segments_with_a_marker(tmp_path):
    """head 10, tail 8 (segments of 4): 10 + 21 bytes keep the head, the segments at 26 and 30, 16 dropped."""
    path = tmp_path / "7.log"
    writer = Writer(path, Caps(head=10, tail=8))
    writer.write(b"0123456789")
    writer.write(LETTERS)
    writer.close()
    assert names(tmp_path) == ["7.log", "7.log.26", "7.log.30"]
    assert (path.read_bytes(), (tmp_path / "7.log.26").read_bytes(), (tmp_path / "7.log.30").read_bytes()) == \
        (b"0123456789", b"qrst", b"u")
    assert joblog.end(path) == 31
    assert joblog.read(path) == (b"0123456789\n--- quasched: 16 bytes dropped ---\nqrstu", 31)
    assert joblog.read(path, 3, limit=4) == (b"3456", 7)  # within the head
    assert joblog.read(path, 12) == (b"\n--- quasched: 14 bytes dropped ---\nqrstu", 31)  # from within the gap
    assert joblog.read(path, 28) == (b"st" b"u", 31)
    assert joblog.read(path, 31) == (b"", 31)
    assert joblog.tail(path, 3) == (b"stu", 31)
    assert joblog.tail(path, 6) == (b"qrstu", 31)  # its start falls among the dropped bytes: the tail kept
    assert joblog.tail(path, 100, lines=1) == (b"qrstu", 31)


def test_a_new_writer_resumes_where_the_files_say(tmp_path):
    """The next run's writer (or the executor's header line) continues the same log within the same cap."""
    path, caps = tmp_path / "7.log", Caps(head=10, tail=8)
    joblog.append(path, caps, b"01234567")  # 8: the head is not full
    joblog.append(path, caps, b"89ab")  # 2 fill the head, 2 start the segment at 10
    assert names(tmp_path) == ["7.log", "7.log.10"] and path.read_bytes() == b"0123456789"
    joblog.append(path, caps, b"cdefghij")  # 2 more fill the segment at 10; then segments at 14 and 18
    assert names(tmp_path) == ["7.log", "7.log.14", "7.log.18"]
    assert joblog.read(path) == (b"0123456789\n--- quasched: 4 bytes dropped ---\nefghij", 20)


def test_a_log_within_its_cap_is_whole_and_a_removed_one_says_why(tmp_path):
    path = tmp_path / "3.log"
    joblog.append(path, Caps(head=10, tail=8), b"line 1\nline 2\n")  # 14 bytes: the head and one segment
    assert joblog.read(path) == (b"line 1\nline 2\n", 14)
    assert joblog.tail(path, 100, lines=1) == (b"line 2\n", 14)
    assert joblog.remove(path, "gone") == 14 - 5
    assert names(tmp_path) == ["3.log"] and joblog.read(path) == (b"gone\n", 5)
    assert Caps.of_total(64 << 20) == Caps(32 << 20, 32 << 20) and Caps.of_total(5) == Caps(3, 2)
