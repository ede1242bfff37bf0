"""The lab: what measures, projects and builds the runtime, apart from it. `import spot` loads none of it; the CLI
imports each module inside the subcommand that needs it.

    build/             the offline pipeline that built the embedded target and its drafter (`spot build <step>`)
    bench.py           every decoding method on the same prompts and seeds (`spot bench`, bench/*.py)
    dispatch_count.py  ops and host syncs per target pass, by stage (`spot bench`'s dispatch_per_pass)
    project.py         the GPU roofline projection (`spot project`, docs/projection.md)
    plots.py           PNG plots (matplotlib) and the commit-order text
    demo.py            the one-screen demo (`spot demo`, `make demo`)
"""
