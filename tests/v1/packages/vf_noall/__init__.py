import verifiers.v1 as vf


class Lonely(vf.Taskset):
    def load(self):
        return []
