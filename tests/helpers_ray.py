"""An in-process stand-in for the few Ray calls distributed R2D2's learner loop makes (tests without Ray)."""

from __future__ import annotations


class InstantRay:
    """Each actor is an :class:`~rlfunc.scale.distributed.ActorProcess` here, a call runs at once, and every
    finished call is returned by one ``wait``, as when all queued chunks reach a busy driver together."""

    class exceptions:
        class ActorUnavailableError(Exception):
            pass

        class RayActorError(Exception):
            pass

        class ObjectLostError(Exception):
            pass

    class Ref:
        def __init__(self, value):
            self.value = value

    def handle(self, actor):
        """The handle of one actor (``collect`` and ``info``, each run at once); a stand-in with other timing
        overrides this."""

        class Method:
            def __init__(self, fn):
                self.fn = fn

            def remote(self, *args):
                return InstantRay.Ref(self.fn(*args))

        class Handle:
            collect, info = Method(actor.collect), Method(actor.info)

        return Handle()

    def remote(self, cls):
        stand_in = self

        class Factory:
            def options(self, **_):
                return self

            def remote(self, *args):
                return stand_in.handle(cls(*args))

        return Factory()

    def put(self, value):
        return value

    def get(self, ref):
        return ref.value

    def wait(self, calls, num_returns=1, timeout=None):
        return list(calls), []

    def kill(self, actor, no_restart=True):
        pass

    def cluster_resources(self):
        return {"CPU": 8.0}

    def available_resources(self):
        return {"CPU": 8.0}

    def shutdown(self):
        pass
