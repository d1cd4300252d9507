"""A config.json path that is not a readable config is refused naming the file, and a size key that no number
can hold is refused naming the key with its path; the command line turns each into exit 2 and one line.

The cases of the reliability audit at 3f3cb8a (its Part 3, findings F1 to F4): a FIFO nobody writes hung the
read forever, ``/dev/zero`` ran out of memory, a 5,000-digit integer gave Python's own digit-limit message
(naming neither file nor key), and 10**400 in a size key was refused naming the internal field (``d_model``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvmath as km
from kvmath import cli
from kvmath.hf_config import MAX_CONFIG_BYTES, weights_from_hf_config

DATA = Path(__file__).parents[1] / "data" / "hf_configs"
LLAMA = json.loads((DATA / "meta-llama--Llama-3.1-8B" / "config.json").read_text())
GEMMA3 = json.loads((DATA / "google--gemma-3-12b-it" / "config.json").read_text())
ROOT = Path(__file__).parents[2]


def _decode(capsys, path) -> tuple[int, str, str]:
    code = cli.main(["decode", "--config", str(path), "--hardware", "h100-sxm", "--batch", "1", "--context", "1024"])
    out, err = capsys.readouterr()
    return code, out, err


def _refused_in_one_line(capsys, path, *words, readers=(km.Model.from_hf_config, weights_from_hf_config)) -> None:
    """The API's ``readers`` and the CLI refuse ``path``, naming it and ``words``."""
    for read in readers:
        with pytest.raises(ValueError) as info:
            read(path)
        assert str(path) in str(info.value), (read.__name__, str(info.value))
        for word in words:
            assert word in str(info.value), (read.__name__, str(info.value))
    code, out, err = _decode(capsys, path)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(path) in err and all(word in err for word in words), err


# ----- files that are not config files -----------------------------------------------------


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path, capsys):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    _refused_in_one_line(capsys, fifo, "FIFO")
    # and in a fresh process (what hung): exit 2 and one line, well within the 20 s the test allows
    proc = subprocess.run([sys.executable, "-m", "kvmath", "decode", "--config", str(tmp_path), "--hardware",
                           "h100-sxm", "--batch", "1", "--context", "1024"], capture_output=True, text=True,
                          timeout=20, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "FIFO" in proc.stderr and str(fifo) in proc.stderr


def test_dev_zero_is_refused_unread(capsys):
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero on this system")
    _refused_in_one_line(capsys, "/dev/zero", "character device")


def test_a_directory_named_config_json_is_refused(tmp_path, capsys):
    (tmp_path / "config.json").mkdir()  # a folder's config.json is read: here it is itself a folder
    _refused_in_one_line(capsys, tmp_path, "config.json' is a directory")


def test_a_directory_without_a_config_is_refused_naming_the_file_looked_for(tmp_path):
    with pytest.raises(ValueError, match=f"cannot read config file '{tmp_path / 'config.json'}'"):
        km.Model.from_hf_config(tmp_path)


def test_a_file_over_the_size_cap_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no 16 MiB written
        f.truncate(MAX_CONFIG_BYTES + 1)
    _refused_in_one_line(capsys, big, "larger than 16 MiB")


def test_non_utf8_and_invalid_json_are_refused(tmp_path, capsys):
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"model_type": "llama", "_name_or_path": "caf\u00e9"}'.encode("latin-1"))
    _refused_in_one_line(capsys, latin, "not UTF-8")
    broken = tmp_path / "broken.json"
    broken.write_text('{"model_type": "llama",')
    _refused_in_one_line(capsys, broken, "not JSON")


def test_a_config_saved_with_a_byte_order_mark_is_read(tmp_path):
    bom = tmp_path / "config.json"
    bom.write_text(json.dumps(LLAMA), encoding="utf-8-sig")
    # Llama 3.1 8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B per token
    assert km.Model.from_hf_config(bom).kv_bytes_per_token() == 32 * 8 * 128 * 2 * 2


# ----- numbers no size can be ------------------------------------------------------------


def _write(tmp_path, config: dict, text_edit=None) -> Path:
    path = tmp_path / "config.json"
    text = json.dumps(config)
    path.write_text(text_edit(text) if text_edit else text)
    return path


def test_a_5000_digit_integer_names_the_file_and_the_key(tmp_path, capsys):
    path = _write(tmp_path, LLAMA, lambda t: t.replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000))
    _refused_in_one_line(capsys, path, "'hidden_size'", "5,000 digits", readers=(km.Model.from_hf_config,))
    code, out, err = _decode(capsys, path)
    assert "set_int_max_str_digits" not in err and "4300" not in err


def test_a_long_integer_in_a_key_kvmath_does_not_read_is_ignored(tmp_path):
    path = _write(tmp_path, LLAMA, lambda t: t.replace('"bos_token_id": 128000', '"bos_token_id": ' + "7" * 5000))
    assert km.Model.from_hf_config(path).d_model == 4096


def test_a_size_beyond_float64_names_the_key_with_its_path_not_the_model_field(tmp_path, capsys):
    config = json.loads(json.dumps(GEMMA3))
    config["text_config"]["num_attention_heads"] = 10**400
    path = _write(tmp_path, config)
    _refused_in_one_line(capsys, path, "'text_config.num_attention_heads'", "too large", readers=(km.Model.from_hf_config,))
    with pytest.raises(ValueError) as info:
        km.Model.from_hf_config(path)
    assert "n_heads is too large" not in str(info.value)  # the Model field's refusal, as it was
    # the same from a dict: no file to name, the key still named
    with pytest.raises(ValueError, match="'text_config.num_attention_heads' is too large"):
        km.Model.from_hf_config(config)


def test_a_float_beyond_float64_in_a_size_key_is_refused_by_name(tmp_path, capsys):
    path = _write(tmp_path, LLAMA, lambda t: t.replace('"intermediate_size": 14336', '"intermediate_size": 1e400'))
    _refused_in_one_line(capsys, path, "'intermediate_size'", "1e400", readers=(km.Model.from_hf_config,))
    code, out, err = _decode(capsys, path)
    assert "d_ff" not in err.replace("'intermediate_size'", "")


def test_a_key_error_in_a_file_names_the_file(tmp_path):
    config = dict(LLAMA)
    del config["num_attention_heads"]
    path = _write(tmp_path, config)
    with pytest.raises(ValueError, match=f"config file '{path}': has no 'num_attention_heads'"):
        km.Model.from_hf_config(path)
