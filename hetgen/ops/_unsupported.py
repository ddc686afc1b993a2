"""The refusal a lowering raises for one instance it does not support (re-exported by `hetgen.ops.base`)."""


class Unsupported(Exception):
    """Raised by a lowering when this particular instance (dtype, attribute) is not supported.

    The message says what is unsupported and, where there is one, what would be accepted.
    """
