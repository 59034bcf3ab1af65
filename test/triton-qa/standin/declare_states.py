"""Declares a model's implicit-state tensors as config inputs and outputs.

Used with standin/implicit_state_model.py: Triton's C++ implicit_state
backend reaches its states through Triton's backend state API, while a
Sluice Python model sees a state as an input it is given and an output it
returns, both declared in its configuration. For each
`sequence_batching { state [...] }` entry of CONFIG this appends an input
named input_name and an output named output_name (the state's data type
and dims) unless the configuration declares them already.

usage: declare_states.py CONFIG
"""

import re
import sys


def main(path):
    text = open(path).read()
    declared = set(re.findall(r'(?<![\w])name:\s*"([^"]+)"', text))
    adds = []
    for m in re.finditer(r"input_name:\s*\"([^\"]+)\"\s*output_name:\s*\"([^\"]+)\"\s*data_type:\s*(\w+)\s*dims:\s*(\[[^\]]*\]|-?\d+)", text):
        inp, out, dtype, dims = m.groups()
        if not dims.startswith("["):
            dims = "[ %s ]" % dims
        if inp not in declared:
            adds.append('input [ { name: "%s" data_type: %s dims: %s } ]' % (inp, dtype, dims))
        if out not in declared:
            adds.append('output [ { name: "%s" data_type: %s dims: %s } ]' % (out, dtype, dims))
    if adds:
        with open(path, "a") as f:
            f.write("\n" + "\n".join(adds) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
