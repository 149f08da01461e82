"""invalid-suppression: a suppression comment that names no jaxlint rule, so it silences nothing."""
from __future__ import annotations

from typing import Optional

from .base import Rule


class InvalidSuppression(Rule):
    """
    ## What it does
    Flags suppression comments that cannot work: a rule name or code in `# jaxlint: ignore[...]`,
    `# jaxlint: ignore-file[...]` or `# noqa: JL...` that is not a jaxlint rule (a typo such as
    `traced-iff`, a code such as `JL110` that does not exist), and a `# jaxlint:` directive that is
    not one of `ignore`, `ignore-file` and `skip-file`.

    ## Why is this bad?
    A mistyped suppression silences nothing, so the finding it was meant for is still reported, or,
    worse, it is reported again later under a name nobody recognises. The comment reads as if the
    line had been reviewed when it has not.

    ## Example
    ```python
    import jax

    @jax.jit
    def step(x):
        if x > 0:  # jaxlint: ignore[traced-iff]
            return x
        return -x
    ```

    ## Use instead
    ```python
    import jax

    @jax.jit
    def step(x):
        if x > 0:  # jaxlint: ignore[traced-if]
            return x
        return -x
    ```

    ## How it is verified
    Not verified by tracing: it is about the comment, not about JAX. The message offers the closest
    rule name or code when there is one.

    ## Known limitations
    In `# noqa: ...` only codes that start with `JL` are checked: other codes belong to other tools
    (flake8, Ruff), which share the comment.

    ## Options
    Selected by default.

    ## References
    - https://docs.astral.sh/ruff/linter/#error-suppression
    """

    code = "JL903"
    name = "invalid-suppression"
    summary = "suppression comment names no jaxlint rule"
    anywhere = True

    @staticmethod
    def message(item: str, directive: str, suggestion: Optional[str]) -> str:
        """The message for `item` in the suppression comment `directive`."""
        hint = f"; did you mean `{suggestion}`?" if suggestion else "; see `jaxlint rule --all`."
        if not item:
            return f"`{directive}` names no rule, so it suppresses nothing; name one or remove the brackets."
        return f"`{item}` in `{directive}` is not a jaxlint rule name or code, so it suppresses nothing{hint}"

    @staticmethod
    def directive_message(word: str, suggestion: Optional[str]) -> str:
        """The message for an unknown `# jaxlint: WORD` directive."""
        hint = f"; did you mean `{suggestion}`?" if suggestion else " (use `ignore`, `ignore-file` or `skip-file`)."
        return f"`# jaxlint: {word}` is not a jaxlint directive, so it suppresses nothing{hint}"
