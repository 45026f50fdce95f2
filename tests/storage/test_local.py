"""storage/local.py: what the disk's own verbs promise beyond the store-wide tests."""

from __future__ import annotations

from shardpack.storage import storage_at


def test_a_sink_writes_parts_in_order_between_buffered_writes(tmp_path):
    """FileSink.write_parts (a shard's chunk in one writev: more parts than one writev takes
    here) lands after what write() buffered before it and before what it buffers after."""
    sink = storage_at(str(tmp_path)).create("s.bin")
    parts = [bytes([i % 251]) * (1 + i % 300) for i in range(2500)]
    sink.write(b"head")
    sink.write_parts(parts)
    sink.write(b"tail")
    sink.commit()
    assert (tmp_path / "s.bin").read_bytes() == b"head" + b"".join(parts) + b"tail"
