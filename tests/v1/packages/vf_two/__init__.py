import verifiers.v1 as vf


class One(vf.Taskset):
    def load(self):
        return []


class Two(vf.Taskset):
    def load(self):
        return []


__all__ = ["One", "Two"]
