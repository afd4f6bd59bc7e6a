"""``import ckit``: ckit's Python API (:mod:`buildkit.api`), under the distribution's name.

The package inside is ``buildkit``, whose subpackages (``buildkit.launch``, ``buildkit.registry``…) would shadow
the calls of the same names; this name holds only the API, loaded on first use.
"""

from buildkit.api import __all__, __dir__, __getattr__  # noqa: F401 - the module's whole content

TYPE_CHECKING = False
if TYPE_CHECKING:
    from buildkit.api import *  # noqa: F403
