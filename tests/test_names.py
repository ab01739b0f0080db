"""Short display names: the shortest tail of each qualified name that tells it apart."""

from traceprof.result.names import last_part, short_name_map, short_names


def test_short_names_take_as_many_trailing_parts_as_tell_names_apart():
    names = ["enc.layer.3.attention.self", "enc.layer.4.attention.self", "enc.layer.3.mlp", "enc"]
    assert short_names(names) == ["layer.3.attention.self", "layer.4.attention.self", "mlp", "enc"]


def test_a_short_name_never_starts_with_an_index():
    names = ["transformer.h.2", "transformer.h.2.mlp", "transformer.h.3.mlp", "0"]
    assert short_names(names) == ["h.2", "h.2.mlp", "h.3.mlp", "0"]


def test_scope_paths_of_with_stack_traces_shorten_to_their_last_part():
    names = ["M_0.B_0.E_0.L_3", "M_0.B_0.E_0.L_4", "M_0"]
    assert short_names(names) == ["L_3", "L_4", "M_0"]


def test_a_name_that_is_another_names_tail_is_kept_whole_and_the_other_grows():
    assert short_names(["self", "a.b.self"]) == ["self", "b.self"]


def test_equal_names_share_one_short_name_and_order_is_kept():
    assert short_names(["x.y", "z.y", "x.y"]) == ["x.y", "z.y", "x.y"]
    assert short_name_map(["x.y", "x.y", "q"]) == {"x.y": "y", "q": "q"}


def test_last_part():
    assert last_part("a.b.c") == "c"
    assert last_part("root") == "root"
