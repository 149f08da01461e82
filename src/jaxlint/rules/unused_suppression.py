"""unused-suppression: a suppression comment that silences no finding (opt-in, like Ruff's RUF100)."""
from __future__ import annotations

from .base import Rule


class UnusedSuppression(Rule):
    """
    ## What it does
    Flags `# jaxlint: ignore[...]`, `# jaxlint: ignore-file[...]` and `# noqa: JL...` comments (or one
    rule named in them) that suppress no finding: the hazard was fixed, the code moved, or jaxlint got
    more precise. `--fix` removes the comment, or only the unused name when others in it still work.

    ## Why is this bad?
    A stale suppression hides the next real hazard on that line (or, file-wide, in the whole file),
    and tells readers the line was reviewed for a problem it no longer has.

    ## Example
    ```python
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        return jnp.where(x > 0, x, -x)  # jaxlint: ignore[traced-if]
    ```

    ## Use instead
    ```python
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(x):
        return jnp.where(x > 0, x, -x)
    ```

    ## How it is verified
    Not verified by tracing: a suppression is unused when the static pass reports nothing it
    silences. Verification never runs on suppressed findings, so it cannot change the answer.

    ## Known limitations
    Only rules that ran on the file count: a name of a rule that is not selected (or is ignored for
    the file by `per-file-ignores`) is never reported, so a narrow `--select` does not strip comments
    that a full run needs. A bare `# noqa` and codes of other tools (`# noqa: E501`) are left alone:
    they may serve flake8 or Ruff. A finding in one file can depend on traced callers in another
    file, so run `--fix` for this rule over the whole project rather than over a few files.

    ## Options
    Off unless selected: `--extend-select unused-suppression` (or `JL904`, or `ALL`).

    ## References
    - https://docs.astral.sh/ruff/rules/unused-noqa/
    """

    code = "JL904"
    name = "unused-suppression"
    summary = "suppression comment silences no finding"
    anywhere = True
    opt_in = True

    @staticmethod
    def message(directive: str, unused: list[str], whole: bool) -> str:
        """The message for a suppression comment `directive` whose names in `unused` silence nothing."""
        shown = ", ".join(f"`{u}`" for u in unused)
        if whole and not unused:
            return f"`{directive}` suppresses no finding; remove it."
        if whole:
            return f"`{directive}` suppresses no finding ({shown} reported nothing here); remove it."
        return f"{shown} in `{directive}` suppresses no finding; remove it from the comment."
