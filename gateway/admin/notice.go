package admin

import (
	"errors"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"usher/gateway/httpapi"
	"usher/internal/catalog"
	"usher/internal/problem"
)

// PutNotice answers PUT /v1/admin/queues/{q}/notice {"message": "…",
// "level": "info|warning"}: every waiting shopper sees it within a second
// (poll answers' notice, the notifier's notice event, the page's banner).
// It is part of the queue's configuration — stored by compare-and-set,
// audited on USHER_OPS like any change.
func (a *API) PutNotice(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	n := catalog.Notice{Level: catalog.NoticeInfo}
	if err := httpapi.DecodeBody(c.Body(), &n); err != nil {
		return problem.New(fiber.StatusBadRequest, "invalid-body", `the body must be {"message": "…", "level": "info|warning"}: `+err.Error())
	}
	n.Since = a.now().UTC()
	if errs := n.Validate(); len(errs) > 0 {
		p := problem.New(fiber.StatusBadRequest, "invalid-notice", strconv.Itoa(len(errs))+" invalid field(s)")
		for _, fe := range errs {
			p.InvalidParams = append(p.InvalidParams, problem.Param{Name: fe.Name, Reason: fe.Reason})
		}
		return p
	}
	return a.setNotice(c, cfg.Name, &n)
}

// DeleteNotice answers DELETE /v1/admin/queues/{q}/notice: the banner goes.
func (a *API) DeleteNotice(c *fiber.Ctx) error {
	cfg, err := httpapi.Queue(c, a.queues)
	if err != nil {
		return err
	}
	return a.setNotice(c, cfg.Name, nil)
}

func (a *API) setNotice(c *fiber.Ctx, q string, n *catalog.Notice) error {
	prev, cfg, err := a.queues.Update(c.UserContext(), q, func(cfg *catalog.Config) bool {
		if n == nil && cfg.Notice == nil {
			return false
		}
		cfg.Notice = n
		return true
	})
	switch {
	case errors.Is(err, catalog.ErrUnchanged):
		return c.SendStatus(fiber.StatusNoContent)
	case err != nil:
		return httpapi.Unavailable(err, "the notice could not be stored; retry")
	}
	a.publishConfigChange(c, prev, cfg)
	if n == nil {
		return c.SendStatus(fiber.StatusNoContent)
	}
	return c.JSON(n)
}
