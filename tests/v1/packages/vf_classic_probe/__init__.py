"""A classic environment among the v1 test packages: vf.load_environment must keep it classic."""

import verifiers as vf


def load_environment(**kwargs):
    rows = [{"question": "1+1?", "answer": "2"}]
    return vf.SingleTurnEnv(dataset=rows, rubric=vf.Rubric(funcs=[lambda completion, answer, **k: 1.0]), **kwargs)
