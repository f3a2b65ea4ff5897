"""One module per checkpoint family; each returns a CheckpointView and knows nothing of UI.

What a view's entries are (its traits and state map) is decided here, by the readers; the view
carries the answers (:func:`ckpt_explorer.view.use_decider`).
"""

from ..types import StateMap, Traits
from ..view import CheckpointView, use_decider
from .state_map import state_map
from .traits import traits_of


class _ReadersDecide:
    def traits(self, view: CheckpointView) -> Traits:
        return traits_of(view.detection, (f.path for f in view.files))

    def state_map(self, view: CheckpointView) -> StateMap:
        return state_map(view)


use_decider(_ReadersDecide())
