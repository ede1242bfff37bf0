"""The offline pipeline that builds the embedded target and its order drafter (`spot build <step>`).

It imports the runtime (`spot`) and is never imported by it: `import spot` loads none of these modules.
Steps, in order: corpus -> tokenizer -> target -> collect -> drafter (-> evaluate) -> tune; see `cli.py`.
"""
