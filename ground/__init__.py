"""The ground floor every package stands on: the settings of ``config/<env>.yaml``, time passed in,
and the checkpoint positions.

It imports nothing of ours, so the fleet (``consumer``), the emulator, the pipeline, the tools and the
stacks can all read it without importing one another.
"""
