"""`specverify bench`: device time, host time, launches and bandwidth of every stage's implementations
on its benchmark input (`Stage.bench`), beside the launch floor and the device's copy bandwidth.

`inputs` builds the stages' benchmark inputs, `timing` measures one call (in the process that runs the
implementation), `run` checks and times (stage, backend, B, V), `report` renders the table and the JSON,
`figures` draws the PNGs, `baselines` holds naive implementations measured beside ours.
"""
