"""Thin Kubeflow Pipelines components over the ``ctr_volcano`` cores.

One module per step (``data_prep``, ``train``, ``evaluate``); each component is also compiled to
``<name>.yaml`` here for users who load components from files (``kfp.components.load_component_from_file``).
Top-level imports stay stdlib + kfp + our light modules; heavy libraries are imported inside the
component functions (``tests/test_layering.py`` enforces it).
"""

__all__: list = []
