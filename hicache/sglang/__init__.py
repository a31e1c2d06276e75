"""SGLang in: a launch command (or a ``server_args`` dump) and a Hugging Face
``config.json`` become a hicache-lab scenario.

:mod:`launch` reads what the user has (a shell command, a file holding one, a JSON/YAML
mapping of server args, or the ``ServerArgs(...)`` line SGLang logs) into SGLang's own
field names; :mod:`mapping` maps those fields onto scenario keys and names every flag it
ignores or value it assumes; :mod:`hf_config` turns ``config.json`` into a model preset;
:mod:`command` wires them to ``hicache-lab run --from-sglang``. Flag names are SGLang
0.5.23's (``sglang/srt/arg_groups/fields/`` in https://github.com/sgl-project/sglang).
"""
