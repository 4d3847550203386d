"""vrh.runs.safe_paths: nothing below a folder vrh was given is opened, written, renamed or removed through a
symlink, in any component (issue 45, items 2-8)."""

import hashlib
import os

import pytest

from vrh.runs import safe_paths as sp


def _sum(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def world(tmp_path):
    """``root`` (the folder vrh was given) and ``victim/`` beside it, holding ``a.txt``."""
    root, victim = tmp_path / "root", tmp_path / "victim"
    root.mkdir()
    victim.mkdir()
    (victim / "a.txt").write_text("precious\n")
    return root, victim


def _outside_unchanged(victim, before):
    assert sorted(p.name for p in victim.iterdir()) == ["a.txt"]
    assert _sum(victim / "a.txt") == before


@pytest.mark.parametrize("op", ["open_write", "open_append", "write_atomic", "unlink", "rmtree", "replace_src",
                                "replace_dst", "mkdirs", "rmdir"])
def test_a_linked_folder_on_the_way_is_refused_by_every_operation(world, op):
    root, victim = world
    before = _sum(victim / "a.txt")
    (root / "link").symlink_to(victim)
    (root / "mine").write_text("x")
    target = root / "link" / "a.txt"
    calls = {"open_write": lambda: sp.open_write(root, target, "w"),
             "open_append": lambda: sp.open_append(root, target),
             "write_atomic": lambda: sp.write_atomic(root, target, "evil"),
             "unlink": lambda: sp.unlink(root, target),
             "rmtree": lambda: sp.rmtree(root, root / "link" / "sub"),
             "replace_src": lambda: sp.replace(root, target, root / "mine"),
             "replace_dst": lambda: sp.replace(root, root / "mine", target),
             "mkdirs": lambda: sp.mkdirs(root, root / "link" / "new"),
             "rmdir": lambda: sp.rmdir(root, root / "link" / "d")}
    with pytest.raises(sp.SymlinkRefused, match=r"link is a symlink inside .*root; vrh never writes or deletes"):
        calls[op]()
    _outside_unchanged(victim, before)
    assert (root / "mine").read_text() == "x"


def test_a_link_deep_in_the_path_is_refused_too(world):
    root, victim = world
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "c").symlink_to(victim)
    with pytest.raises(sp.SymlinkRefused, match="c is a symlink"):
        sp.open_write(root, root / "a" / "b" / "c" / "a.txt", mkdir=True)
    with pytest.raises(sp.SymlinkRefused):
        sp.check(root, "a/b/c/a.txt")
    assert sp.check(root, "a/b/free.txt") == root / "a" / "b" / "free.txt"
    assert not sp.is_symlink_free(root, "a/b/c")


def test_a_linked_file_is_refused_not_truncated_and_a_temporary_loses_its_link(world):
    root, victim = world
    before = _sum(victim / "a.txt")
    (root / "f.txt").symlink_to(victim / "a.txt")
    for mode in ("w", "a"):
        with pytest.raises(sp.SymlinkRefused, match="f.txt is a symlink"):
            sp.open_write(root, root / "f.txt", mode)
    with pytest.raises(sp.SymlinkRefused):
        sp.open_append(root, root / "f.txt")
    (root / "g.json.tmp").symlink_to(victim / "a.txt")
    sp.write_atomic(root, root / "g.json", "{}\n")  # the planted temporary is unlinked, then created O_EXCL
    assert (root / "g.json").read_text() == "{}\n" and not (root / "g.json.tmp").exists()
    (root / "dangling.tmp").symlink_to(victim / "new.txt")
    sp.write_atomic(root, root / "dangling", "x")
    _outside_unchanged(victim, before)


def test_unlink_and_rmtree_remove_a_link_itself_never_its_target(world):
    root, victim = world
    before = _sum(victim / "a.txt")
    (root / "l").symlink_to(victim / "a.txt")
    sp.unlink(root, root / "l")
    assert not (root / "l").is_symlink()
    tree = root / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "to_dir").symlink_to(victim)
    (tree / "to_file").symlink_to(victim / "a.txt")
    sp.rmtree(root, tree)
    assert not tree.exists()
    (root / "lt").symlink_to(victim)
    with pytest.raises(sp.SymlinkRefused):
        sp.rmtree(root, root / "lt")
    sp.rmtree(root, root / "missing")  # nothing to do
    _outside_unchanged(victim, before)


def test_an_append_to_a_hard_linked_file_leaves_the_other_copy_alone(world):
    root, victim = world
    (root / "s.jsonl").write_text("1\n")
    os.link(root / "s.jsonl", victim / "copy.jsonl")
    with sp.open_append(root, root / "s.jsonl") as f:
        f.write("2\n")
    assert (root / "s.jsonl").read_text() == "1\n2\n"
    assert (victim / "copy.jsonl").read_text() == "1\n"
    assert os.stat(root / "s.jsonl").st_nlink == 1


def test_paths_outside_the_root_are_refused(world):
    root, _ = world
    with pytest.raises(ValueError, match="not"):
        sp.parts_below(root, "../x")
    with pytest.raises(ValueError, match="not inside"):
        sp.parts_below(root, "/etc/passwd")


def test_mkdirs_and_writes_below_real_folders_work(world):
    root, _ = world
    sp.mkdirs(root, root / "a" / "b")
    with sp.open_write(root, "a/b/c.txt") as f:
        f.write("hi")
    sp.write_atomic(root, root / "a" / "n" / "d.bin", b"\x00", mkdir=True)
    assert (root / "a" / "b" / "c.txt").read_text() == "hi" and (root / "a" / "n" / "d.bin").read_bytes() == b"\x00"
    sp.replace(root, "a/b/c.txt", "a/n/c.txt")
    sp.unlink(root, "a/n/c.txt")
    sp.rmdir(root, "a/b")
    assert sorted(p.name for p in (root / "a").iterdir()) == ["n"]


def test_a_file_opened_here_carries_its_path_as_its_name(world):
    """A full disk fails write() with no filename: vrh.cli names the file from the open file object's name."""
    root, _ = world
    with sp.open_write(root, root / "r.json", "w") as f, sp.open_append(root, root / "s.jsonl") as g:
        assert (f.name, g.name) == (str(root / "r.json"), str(root / "s.jsonl"))
