"""The workshop kit (book/teaching.md): ``python -m kvbook.workshop.<tool>``, as the Makefile runs them."""
