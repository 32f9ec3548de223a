"""An implementation module that forges the suite's probes when it is imported, before any call: its
`expand` (`tests.hostile.patches_the_probes`) then syncs and launches 40 extra kernels from its first call."""
from tests import hostile

hostile.forge_the_probes()
expand = hostile.patches_the_probes
