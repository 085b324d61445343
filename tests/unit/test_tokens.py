"""Token bytes for logprobs: from the byte-level vocabulary, or the text when the id is unknown."""


from tritonchat.tokens import TokenBytes


def test_pieces_of_a_character_rebuild_it(tokenizer):
    token_bytes = TokenBytes(tokenizer)
    ids = tokenizer.encode("wörld 🎉", add_special_tokens=False)
    pieces = [token_bytes(i, tokenizer.decode([i])) for i in ids]
    assert bytes(b for piece in pieces for b in piece).decode("utf-8") == "wörld 🎉"
    assert any(tokenizer.decode([i]) == "\ufffd" for i in ids)  # (so the test means something)


def test_unknown_ids_use_their_own_text(tokenizer):
    token_bytes = TokenBytes(tokenizer)
    assert token_bytes(-1, "ab") == list(b"ab")
    assert token_bytes(-1, "é") == list("é".encode())  # not the cached "ab"
