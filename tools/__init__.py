"""The ``consumer`` command and what it drives from an operator's or developer's machine.

The sub-commands, the local demo and its chaos, EMR packaging, the planner, the scaffold and the
settings documentation. This is the one package that imports the fleet (``consumer``) together with
the emulator and the pipeline; none of them imports it.
"""
