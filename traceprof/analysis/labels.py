"""The names the analysis gives CPU time spent outside every op, in one place (the reports show
them as they are written here):

- a module's own time outside its ops, the Python code of its forward: :data:`OUTSIDE_OPS` among
  the module's ops (``--ops``), :data:`MODULE_CODE` among the kernels or ops a diff lists inside
  a node;
- a step's time between its top-level slices: :data:`BETWEEN_OPS_GROUP`, the group of the
  ``(not in any module)`` bucket that holds it, and :data:`BETWEEN_OPS_LABEL` among ops.

Nothing is imported here, so that a diff read from the cache can name them without loading the
analysis.
"""

#: a module's own CPU time outside every op, among its ops
OUTSIDE_OPS = "(outside ops)"
#: the same time, among the kernels or ops a diff lists inside a node
MODULE_CODE = "(module code)"
#: the group of a step's CPU time between its top-level ops, in the unattributed bucket
BETWEEN_OPS_GROUP = "(step, between ops)"
#: the same time, among ops
BETWEEN_OPS_LABEL = "(between ops)"
