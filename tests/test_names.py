"""Short display names: the shortest tail of each qualified name that tells it apart."""

from traceprof.result.names import own_parts, path_parts, short_name_map, short_names


def _parts(names: list[str]) -> list[tuple[str, ...]]:
    return [tuple(q.split(".")) for q in names]


def test_short_names_take_as_many_trailing_parts_as_tell_names_apart():
    names = ["enc.layer.3.attention.self", "enc.layer.4.attention.self", "enc.layer.3.mlp", "enc"]
    assert short_names(_parts(names)) == ["layer.3.attention.self", "layer.4.attention.self", "mlp", "enc"]


def test_a_short_name_never_starts_with_an_index():
    names = ["transformer.h.2", "transformer.h.2.mlp", "transformer.h.3.mlp", "0"]
    assert short_names(_parts(names)) == ["h.2", "h.2.mlp", "h.3.mlp", "0"]


def test_scope_paths_of_with_stack_traces_shorten_to_their_last_part():
    names = ["M_0.B_0.E_0.L_3", "M_0.B_0.E_0.L_4", "M_0"]
    assert short_names(_parts(names)) == ["L_3", "L_4", "M_0"]


def test_a_name_that_is_another_names_tail_is_kept_whole_and_the_other_grows():
    assert short_names(_parts(["self", "a.b.self"])) == ["self", "b.self"]


def test_equal_names_share_one_short_name_and_order_is_kept():
    assert short_names(_parts(["x.y", "z.y", "x.y"])) == ["x.y", "z.y", "x.y"]
    assert short_name_map({"k1": ("x", "y"), "k2": ("x", "y"), "k3": ("q",)}) == {
        "k1": "y",
        "k2": "y",
        "k3": "q",
    }


def test_a_part_with_dots_is_one_part():
    # DLRM's annotations: a path part may hold dots; a tail is made of whole parts
    fwd = ("## forward ##", "DistributedDataParallel.forward")
    inner = fwd + ("DistributedDataParallel.forward",)
    step = ("## optimizer ##", "Optimizer.step#Adagrad.step")
    assert path_parts(fwd) == fwd
    assert short_names([fwd, inner, step]) == [
        "## forward ##.DistributedDataParallel.forward",
        "DistributedDataParallel.forward.DistributedDataParallel.forward",
        "Optimizer.step#Adagrad.step",
    ]


def test_paths_of_qualified_names_read_as_attributes():
    path = ("", "transformer", "transformer.h", "transformer.h.0", "transformer.h.0.mlp")
    assert path_parts(path) == ("transformer", "h", "0", "mlp")
    # a level with no node (a container never called): its attributes are parts too
    assert path_parts(("model", "model.layers.0")) == ("model", "layers", "0")
    assert path_parts(("", "a.b")) == ("a", "b")
    # the node's own label replaces the last part (a folded row; a root named "")
    assert path_parts(("", "transformer", "(more)"), "(3 more)") == ("transformer", "(3 more)")
    assert path_parts(("",), "GPT") == ("GPT",)


def test_own_parts_of_a_node_below_its_parent():
    assert own_parts(
        "DistributedDataParallel.forward", "## forward ##.DistributedDataParallel.forward", "## forward ##"
    ) == ("DistributedDataParallel.forward",)
    assert own_parts("0", "model.layers.0", "model") == ("layers", "0")
    assert own_parts("c_fc", "h.0.mlp.c_fc", "h.0.mlp") == ("c_fc",)
    assert own_parts("aten::mm", "(not in any module)/aten::mm", "(not in any module)") == ("aten::mm",)
    assert own_parts("GPT", "", None) == ("GPT",)


def test_only_ascii_digits_make_an_index():
    # "²" and "٣" are str.isdigit() but not indexes (the page's script, /^[0-9]+$/, agrees)
    assert short_names([("a", "²"), ("b", "²"), ("a", "٣")]) == ["a.²", "b.²", "٣"]
    assert short_names([("h", "2"), ("g", "3")]) == ["h.2", "g.3"]
