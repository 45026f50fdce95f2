"""options.py: PackOptions validation, and the --shard-size and --resize parsers."""

from __future__ import annotations

import dataclasses
import re

import pytest

from shardpack.errors import OptionError, ShardpackError
from shardpack.options import DEFAULT_SHARD_SIZE, PackOptions, as_flags, parse_resize, parse_size
from tests.helpers import make_tree


def test_defaults_are_valid():
    options = PackOptions()
    assert options.shard_size == DEFAULT_SHARD_SIZE == 128 * 2**20
    assert (options.encode, options.check, options.on_error) == ("keep", "header", "skip")


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PackOptions().seed = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("backend", "ray", "--backend"),
        ("encode", "gif", "--encode"),
        ("encode", "jpeg2000", "--encode"),
        ("format", "zip", "--format"),
        ("check", "full", "--check"),
        ("on_error", "ignore", "--on-error"),
        ("compression", "zstd", "--compression"),
        ("shards", 0, "--shards"),
        ("shards", -3, "--shards"),
        ("shard_size", 0, "--shard-size"),
        ("workers", 0, "--workers"),
        ("max_side", -1, "--max-side"),
        ("max_pixels", 0, "--max-pixels"),
        ("quality", 0, "--quality"),
        ("quality", 101, "--quality"),
        ("resize", (0, 10), "--resize"),
        ("name", "../evil", "--name"),
        ("name", "a/b", "--name"),
        ("name", ".hidden", "--name"),
        ("name", "", "--name"),
        ("name", "has space", "--name"),
        ("name", "dash-name", "--name"),
    ],
)
def test_invalid_values_raise_with_the_value_in_the_message(field, value, option):
    with pytest.raises(OptionError) as caught:
        PackOptions(**{field: value})
    # the parameter as data, for each face to say (a bad --name twice: and the one to pass)
    assert set(caught.value.options) == {field}
    message = str(caught.value)  # the parameter as Python says it, not the CLI's flag
    assert f"{field}=" in message and option not in message
    assert repr(value) in message
    said = as_flags(caught.value)  # as the CLI says it
    assert option in said and f"{field}=" not in said and repr(value) in said


def test_an_unknown_source_is_refused_by_the_scan_with_the_choices(tmp_path):
    # the sources sit above the options: the registry, not PackOptions, knows their names
    from shardpack.sources import scan

    with pytest.raises(ShardpackError) as caught:
        scan(tmp_path, PackOptions(source="imagenet"))
    message = str(caught.value)
    assert "source=" in message and "'imagenet'" in message and "folder" in message


def test_resize_and_max_side_exclude_each_other():
    with pytest.raises(ShardpackError, match="exclude each other"):
        PackOptions(resize=(32, 32), max_side=64)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "cifar10"},
        {"name": "ImageNet_2012.v2"},
        {"name": "7days"},
        {"shards": 1, "workers": 1, "max_side": 1, "max_pixels": 1, "shard_size": 1},
        {"quality": 1},
        {"quality": 100},
        {"resize": (1, 1)},
        {"encode": "raw", "compression": "gzip", "check": "decode", "on_error": "fail"},
        {"source": "cifar", "backend": "dask", "shuffle": False, "seed": 5},
    ],
)
def test_valid_values_are_accepted(kwargs):
    options = PackOptions(**kwargs)
    for key, value in kwargs.items():
        assert getattr(options, key) == value


@pytest.mark.parametrize(
    ("field", "given", "meant"),
    [
        ("encode", "jpg", "jpeg"),  # JPEG's file extension
        ("encode", "PNG", "png"),
        ("encode", "JPG", "jpeg"),
        ("format", "tfrecords", "tfrecord"),  # what TensorFlow's guides call the files
        ("format", "TFRecord", "tfrecord"),
        ("format", "wds", "webdataset"),  # webdataset's import name
        ("format", "ArrayRecord", "array_record"),
        ("format", "array-record", "array_record"),
        ("on_error", "Skip", "skip"),
        ("resize_mode", "CENTER_CROP", "center-crop"),  # img2dataset's name, in capitals
        ("backend", "loky", "local"),  # its old name
        ("backend", "Loky", "local"),
    ],
)
def test_a_choice_is_taken_by_its_other_names_and_kept_as_its_own(field, given, meant):
    """A name of one certain meaning is taken for it, and the options (the journal, index.json)
    keep the choice's own name."""
    also = {"resize": (8, 8)} if field == "resize_mode" else {}  # a mode needs a size
    options = PackOptions(**{field: given}, **also)
    assert getattr(options, field) == meant
    assert options == PackOptions(**{field: meant}, **also)


@pytest.mark.parametrize(
    ("field", "given", "meant"),
    [
        ("format", "webdatasets", "webdataset"),
        ("format", "parquets", "parquet"),
        ("format", "tfrecordz", "tfrecord"),
        ("encode", "jpgg", "jpeg"),
        ("encode", "webm", "webp"),
        ("backend", "lcoal", "local"),
        ("dedup", "nearby", "near"),
        ("resize_mode", "keep_ratio_large", "keep-ratio-largest"),
    ],
)
def test_a_near_miss_of_a_choice_is_refused_naming_the_choice_meant(field, given, meant):
    """A misspelling is not guessed at: it is refused, every choice named and the nearest
    offered, as each face spells it."""
    with pytest.raises(OptionError) as caught:
        PackOptions(**{field: given}, resize=(8, 8))
    assert str(caught.value).endswith(f", got: {given!r}; did you mean {field}={meant!r}?")
    flag = "--" + field.replace("_", "-")
    assert as_flags(caught.value).endswith(f"; did you mean {flag} {meant}?")


def test_a_choice_near_none_is_refused_with_the_choices_alone():
    with pytest.raises(OptionError) as caught:
        PackOptions(format="zip")
    assert str(caught.value) == (
        "format= must be one of tfrecord, array_record, webdataset, parquet, got: 'zip'"
    )


def test_a_source_in_another_case_is_refused_naming_it(tmp_path):
    from shardpack.sources import scan

    with pytest.raises(OptionError, match=r"got: 'Folder'; did you mean source='folder'\?$"):
        scan(tmp_path, PackOptions(source="Folder"))


def test_output_fields_leave_out_speed_only_options():
    fields = PackOptions(workers=3, backend="dask", overwrite=True, on_error="fail").output_fields()
    assert not {"workers", "backend", "overwrite", "on_error"} & set(fields)
    assert {"encode", "quality", "seed", "shuffle", "compression", "shards"} <= set(fields)
    assert fields["shard_size"] == DEFAULT_SHARD_SIZE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1048576),
        ("0", 0),
        ("512B", 512),
        ("1K", 1024),
        ("1.5K", 1536),
        ("10KB", 10 * 1024),
        ("64M", 64 * 2**20),
        ("64m", 64 * 2**20),
        ("128MiB", 128 * 2**20),
        ("128mib", 128 * 2**20),
        (" 3 MiB ", 3 * 2**20),
        ("1G", 2**30),
        ("0.5GiB", 2**29),
        ("2T", 2 * 2**40),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "-1", "1e3", "12X", "1,000", "MiB", "64Mi", "1 2M"])
def test_parse_size_refuses_with_the_value_in_the_message(text):
    with pytest.raises(ShardpackError, match="shard_size=") as caught:
        parse_size(text)
    assert repr(text) in str(caught.value) and "--shard-size" in as_flags(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("224x224", (224, 224)), ("64X32", (64, 32)), (" 640 x 480 ", (640, 480)), ("1x2", (1, 2))],
)
def test_parse_resize_gives_width_then_height(text, expected):
    assert parse_resize(text) == expected


@pytest.mark.parametrize("text", ["", "224", "224x", "x224", "224*224", "axb", "1x2x3", "-1x5"])
def test_parse_resize_refuses_with_the_value_in_the_message(text):
    with pytest.raises(ShardpackError, match="resize=") as caught:
        parse_resize(text)
    assert repr(text) in str(caught.value) and "--resize" in as_flags(caught.value)


def test_parsed_zero_values_are_refused_by_the_options():
    with pytest.raises(ShardpackError, match="resize= must be WIDTHxHEIGHT"):  # parse_resize's
        PackOptions(resize=parse_resize("0x10"))
    with pytest.raises(ShardpackError, match="shard_size="):
        PackOptions(shard_size=parse_size("0"))


def test_negative_seed_and_oversized_resize_are_refused():
    with pytest.raises(ShardpackError, match="seed= must be a non-negative integer, got: -1"):
        PackOptions(seed=-1)
    with pytest.raises(ShardpackError, match=r"resize=\(100000, 100000\) is over ") as caught:
        PackOptions(resize=(100_000, 100_000))
    assert caught.value.options == ("resize", "max_pixels", "max_pixels")
    assert as_flags(caught.value) == (
        "--resize 100000x100000 is over --max-pixels 178956970; pass a smaller size or raise "
        "--max-pixels"
    )


@pytest.mark.parametrize(
    ("given", "python", "cli"),
    [
        ({"resize_mode": "pad"}, "resize_mode='pad' needs resize=", "--resize-mode pad needs"),
        (  # img2dataset's name for no resize: it listed the modes, not what to do
            {"resize_mode": "no", "resize": (8, 8)},
            "resize_mode='no' (img2dataset's: each image keeps its size) is what leaving out",
            "is what leaving out --resize does: drop --resize-mode and --resize",
        ),
        ({"upscale": False}, "upscale=False needs resize=", "--no-upscale needs --resize"),
        ({"grow": "update", "overwrite": True}, "grow='update' keeps", "--update keeps"),
        ({"index_files": True, "format": "parquet"}, "drop index_files=True", "drop --index-files"),
        (
            {"compression": "gzip", "format": "parquet"},
            "is for format='tfrecord'",
            "--format tfrecord",
        ),
    ],
)
def test_each_face_says_the_options_of_a_refusal_its_own_way(given, python, cli):
    """The Python API says keywords, the CLI flags, from the names the error carries."""
    with pytest.raises(OptionError) as caught:
        PackOptions(**given)
    assert python in str(caught.value) and cli in as_flags(caught.value)
    assert "--" not in str(caught.value) and "=" not in as_flags(caught.value)


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"classes": "apple,banana"}, "PackOptions.classes must be tuple[str, ...] | None"),
        ({"shuffle": "no"}, "PackOptions.shuffle must be bool, got: 'no'"),
        ({"shards": 2.5}, "PackOptions.shards must be int | None, got: 2.5"),
        ({"workers": True}, "PackOptions.workers must be int | None, got: True"),
        ({"quality": "90"}, "PackOptions.quality must be int, got: '90'"),
        ({"max_pixels": None}, "PackOptions.max_pixels must be int, got: None"),
        ({"split": {"train": 0.9, "val": 0.1}}, "PackOptions.split must be tuple"),
        # inside a tuple too: a float size failed in OpenCV on every image, a number among
        # the classes after every shard was written
        ({"resize": [224.5, 224]}, "PackOptions.resize must be tuple[int, int] | None"),
        ({"resize": (10,)}, "PackOptions.resize must be tuple[int, int] | None"),
        ({"classes": ["a", 1]}, "PackOptions.classes must be tuple[str, ...] | None"),
        ({"split": [["train", "most"]]}, "PackOptions.split must be tuple"),
    ],
)  # fmt: skip
def test_a_python_caller_s_wrong_type_is_refused_by_name(given, said):
    """What the CLI parses, a Python caller passes as they like: a string of class names was
    taken a letter a class, shuffle="no" shuffled, a float shard count failed in numpy."""
    with pytest.raises(TypeError, match=re.escape(said)):
        PackOptions(**given)


def test_a_split_or_name_beyond_ascii_is_refused_saying_ascii():
    """Before: "hold only letters, digits, ...", of a name of letters."""
    for given, said in (({"split": (("entraînement", 0.8), ("test", 0.2))}, "split names"),
                        ({"name": "fleurs_é"}, "name= ")):  # fmt: skip
        with pytest.raises(OptionError) as refused:
            PackOptions(**given)
        assert str(refused.value).startswith(said)
        assert "hold only ASCII letters, digits, '_' and '.'" in str(refused.value)


def test_lists_are_taken_for_tuples_and_numpy_integers_for_integers(tmp_path):
    import numpy as np

    from shardpack import pack

    options = PackOptions(classes=["b", "a"], split=[["train", 0.5], ["val", np.float32(0.5)]],
                          resize=[8, np.int32(8)], seed=np.int64(3), workers=1,
                          root=tmp_path)  # fmt: skip
    assert options.classes == ("b", "a") and options.resize == (8, 8)
    assert options.split == (("train", 0.5), ("val", 0.5)) and hash(options)
    assert type(options.seed) is int and type(options.resize[1]) is int
    assert options.root == str(tmp_path)
    # and a run takes them (the journal is JSON: a numpy integer failed there)
    src = make_tree(tmp_path / "src", {"a": 4, "b": 4})
    options = dataclasses.replace(options, root=None, split=None)
    assert pack(src, tmp_path / "out", options).num_records == 8


def test_pack_describe_and_preview_refuse_arguments_of_the_wrong_kind(tmp_path):
    from shardpack import describe, make_preview, pack

    with pytest.raises(TypeError, match=r"options must be a PackOptions, such as"):
        pack(tmp_path, tmp_path / "out", {"encode": "jpeg"})
    with pytest.raises(TypeError, match=r"progress must be called with \(done, total\)"):
        pack(tmp_path, tmp_path / "out", progress="x")
    with pytest.raises(TypeError, match=r"storage_options must be a dict"):
        pack(tmp_path, tmp_path / "out", storage_options="a=b")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"num_records must be an integer >= 0, got: -1"):
        describe(tmp_path, num_records=-1)
    with pytest.raises(ValueError, match=r"n must be a positive integer .*got: 0"):
        make_preview(tmp_path, tmp_path / "p.png", n=0)
    with pytest.raises(TypeError, match=r"dest must be the image file to write .*got: None"):
        make_preview(tmp_path, None)  # os.fspath's "expected str, bytes or os.PathLike"


def test_pad_color_s_help_names_every_colour_it_takes():
    """--help said "white, black, #RRGGBB or R,G,B" while gray was taken too."""
    from shardpack.options import FLAGS, parse_color

    for name in ("white", "black", "gray"):
        assert parse_color(name) and name in FLAGS["pad_color"].help
    with pytest.raises(OptionError, match="must be white, black, gray, #RRGGBB or R,G,B, got"):
        parse_color("purple")


def test_a_name_shard_files_cannot_hold_is_refused_with_one_they_can():
    """`--name my-data` was refused without the name to pass (SRC my-data packs as my_data)."""
    with pytest.raises(OptionError) as caught:
        PackOptions(name="my-data")
    assert str(caught.value).endswith("got: 'my-data'; pass name='my_data'")
    assert as_flags(caught.value).endswith("got: 'my-data'; pass --name my_data")
    with pytest.raises(OptionError) as caught:
        PackOptions(name="---")  # nothing left to suggest
    assert str(caught.value).endswith("got: '---'")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--pad-color", "black"], "--pad-color colours the border of --resize-mode pad, and "
         "this run does not pad; pass --resize-mode pad (with --resize), or drop --pad-color"),
        (["--pad-color", "black", "--resize", "8x8"], "this run does not pad"),
        (["--near-distance", "8"], "--near-distance is the distance of --dedup near, and this "
         "run's is --dedup none; pass --dedup near, or drop --near-distance"),
        (["--near-distance", "8", "--dedup", "exact"], "this run's is --dedup exact"),
        (["--quality", "80", "--encode", "png"], "--quality is the quality of JPEG and WebP, "
         "and this run encodes --encode png; pass --encode jpeg (or webp, or keep), or drop "
         "--quality"),
        (["--quality", "80", "--encode", "raw"], "this run encodes --encode raw"),
    ],
)  # fmt: skip
def test_an_option_that_would_change_nothing_is_refused_before_anything_is_written(
    tmp_path, flags, said
):
    """`--resize 256x256 --pad-color black` (no --resize-mode pad) stretched every image and
    packed without a word, as --near-distance without --dedup near did: refused in one line,
    as --no-upscale without --resize is."""
    from tests.helpers import one_line_error, run_cli

    src = make_tree(tmp_path / "src", {"a": 2, "b": 2})
    done = run_cli("pack", str(src), str(tmp_path / "out"), "--no-progress", *flags)
    assert said in one_line_error(done) and not (tmp_path / "out").exists()


def test_pad_color_quality_and_near_distance_pass_where_used_and_a_grow_takes_the_dataset_s(
    tmp_path,
):
    from shardpack import pack

    src = make_tree(tmp_path / "src", {"a": 2, "b": 2})
    with pytest.raises(OptionError, match=r"pad_color= colours .* drop pad_color=$"):
        pack(src, tmp_path / "refused", PackOptions(pad_color=(0, 0, 0)))
    padded = PackOptions(resize=(8, 8), resize_mode="border", pad_color=(0, 0, 0), workers=1)
    assert pack(src, tmp_path / "out", padded).num_records == 4
    near = PackOptions(dedup="near", near_distance=8, workers=1)
    assert pack(src, tmp_path / "near", near).num_records == 4
    resized = PackOptions(resize=(8, 8), quality=20, workers=1)  # keep re-encodes these JPEGs
    assert pack(src, tmp_path / "quality", resized).num_records == 4
    make_tree(src, {"c": 1}, seed=9)
    grown = pack(src, tmp_path / "out", PackOptions(grow="append", workers=1))
    assert grown.num_records == 5 and grown.index.options["pad_color"] == [0, 0, 0]
